"""Developer tasks of the omni monorepo: `nox -s demo|tests|ray|lint|docs|matrix|package`.

`tests` installs every plugin with its test extras into one venv, except the plugins of
:data:`OWN_SESSION`: omni-ray needs ray[serve] (large), so its tests run in `nox -s ray`, which
`.ci/run` runs after `tests`. It also installs Debian's ``chromium`` and ``chromium-driver`` with
apt-get when they are missing (the playground's browser tests drive them; CI runs as root).

Every session that installs something depending on torch installs ``torch==2.13.0`` first and
explicitly: a loose ``torch`` requirement would otherwise pull a multi-GB CUDA build. Set
``OMNI_TORCH_INDEX_URL`` (e.g. https://download.pytorch.org/whl/cpu) to choose where it comes
from; by default pip's own configuration decides (find-links, a local wheel, PyPI).
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
CORE = ROOT / "core"
ALL_PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
#: Plugins whose tests have their own session (their dependencies stay out of `tests`).
OWN_SESSION = {"omni-ray": "ray"}
PLUGINS = [p for p in ALL_PLUGINS if p.name not in OWN_SESSION]
PACKAGES = [CORE, *ALL_PLUGINS]
TORCH = "torch==2.13.0"
#: One ruff for everyone: a newer release may format or flag differently.
RUFF = "ruff==0.17.6"

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = False


def _extras(package: Path) -> set[str]:
    data = tomllib.loads((package / "pyproject.toml").read_text())
    return set(data.get("project", {}).get("optional-dependencies", {}))


def _dist_name(package: Path) -> str:
    return tomllib.loads((package / "pyproject.toml").read_text())["project"]["name"]


def install_torch(session: nox.Session) -> None:
    index = os.environ.get("OMNI_TORCH_INDEX_URL")
    session.install(TORCH, *(["--extra-index-url", index] if index else []))


def install_workspace(session: nox.Session, *, core_extras: str = "serve,test") -> None:
    """torch first, then omni-core and every plugin editable (with their `test` extras)."""
    install_torch(session)
    args = ["-e", f"{CORE}[{core_extras}]"]
    for plugin in PLUGINS:
        extras = _extras(plugin) & {"test"}
        args += ["-e", f"{plugin}[{','.join(sorted(extras))}]" if extras else str(plugin)]
    # One resolver run over everything keeps the versions consistent; omni-core is satisfied by
    # the working tree, never fetched.
    session.install(*args)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: tiny random-weight checkpoints through `omni generate`, then `omni serve`
    with one request of each kind through the official openai client, into ./out/."""
    install_workspace(session, core_extras="serve")
    # The demo's clients (openai; httpx for /health and the voice list: recent openai releases
    # no longer bring it) and the default voice (piper-tts is GPL-3.0: an optional extra).
    session.install("openai>=1.40", "httpx>=0.27", "-e", f"{ROOT / 'plugins' / 'omni-tts'}[piper]")
    session.run("python", str(ROOT / "demo" / "run_demo.py"), *session.posargs)


#: The browser of the playground's tests (tests/serving/test_playground_*.py): Debian's own.
BROWSER_PACKAGES = ("chromium", "chromium-driver")
BROWSER_FILES = (Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver"))


def apt_install_command() -> list[str]:
    """The non-interactive apt-get line that installs the browser (through sudo when not root)."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    packages = " ".join(BROWSER_PACKAGES)
    script = (
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        f"--no-install-recommends {packages}"
    )
    return [*sudo, "sh", "-c", script]


def install_browser(session: nox.Session) -> None:
    """Headless Chromium and its WebDriver for the browser tests, from apt when missing; no
    apt-get (or no root) is an error here: those tests fail, never skip, without a browser."""
    if all(path.exists() for path in BROWSER_FILES):
        return
    if shutil.which("apt-get") is None:
        session.error(
            f"the browser tests need {' and '.join(map(str, BROWSER_FILES))}: install "
            f"{', '.join(BROWSER_PACKAGES)} (no apt-get on this machine)"
        )
    # run_install, not run: an install step, so `nox --install-only` runs it too
    session.run_install(*apt_install_command(), external=True)
    missing = [str(p) for p in BROWSER_FILES if not p.exists()]
    if missing:
        session.error(f"apt-get installed {BROWSER_PACKAGES} but {missing} are still missing")


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests in ONE pytest process (imports cost seconds; fixtures are shared)."""
    install_browser(session)
    install_workspace(session)
    candidates = [CORE / "tests", *(p / "tests" for p in PLUGINS), ROOT / "tests"]
    paths = [str(p) for p in candidates if p.is_dir()]  # git keeps no empty tests/ folders
    env = {"HF_HUB_OFFLINE": "1", "OMNI_PLATFORM": ""}
    try:
        session.run("pytest", *paths, *session.posargs, env=env)
    except nox.command.CommandFailed as exc:
        if getattr(exc, "return_code", None) == 5 or "code 5" in str(exc.reason or ""):
            session.error(
                "pytest collected no tests (exit code 5): the repository has tests, so a "
                "selection (posargs, markers) or a collection setting is wrong"
            )
        raise


@nox.session
def ray(session: nox.Session) -> None:
    """omni-ray's tests in their own venv: torch, the workspace, then ray[serve] (via omni-ray).

    A real local Ray cluster with 2 replicas of a tiny model and a real PostgreSQL server;
    about 3 minutes on 2 CPU cores.
    """
    install_workspace(session, core_extras="serve,test,postgres")
    session.install("-e", f"{ROOT / 'plugins' / 'omni-ray'}[test]")
    env = {"HF_HUB_OFFLINE": "1", "OMNI_PLATFORM": "", "RAY_USAGE_STATS_ENABLED": "0"}
    session.run("pytest", str(ROOT / "plugins" / "omni-ray" / "tests"), *session.posargs, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole repository (config: ruff.toml): the checks and the formatting.

    The contract rules of the core (layers, cycles, faces, no module-level tables) are tests
    (core/tests/test_contract_*.py), so `nox -s tests` enforces them.
    """
    session.install(RUFF)
    session.run("ruff", "check", str(ROOT), *session.posargs)
    session.run("ruff", "format", "--check", str(ROOT), *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build sdk-docs with `mkdocs build --strict` (the hook reference is generated)."""
    # omni-core itself needs no torch; the hook reference is read from hookspecs.py.
    session.install("mkdocs>=1.6", "-e", str(CORE))
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "-f",
        str(ROOT / "sdk-docs" / "mkdocs.yml"),
        "-d",
        str(ROOT / "sdk-docs" / "site"),
        *session.posargs,
    )


@nox.session
def matrix(session: nox.Session) -> None:
    """Run each package's tox.ini (its own test matrix) against the working-tree omni-core."""
    session.install("tox>=4")
    env = {"OMNI_CORE": str(CORE), "HF_HUB_OFFLINE": "1"}
    failed = []
    for package in PACKAGES:
        if not (package / "tox.ini").is_file():
            session.warn(f"{package.relative_to(ROOT)} has no tox.ini")
            failed.append(package.name)
            continue
        try:
            session.run("tox", "-c", str(package / "tox.ini"), *session.posargs, env=env)
        except nox.command.CommandFailed:
            failed.append(package.name)
    if failed:
        session.error(f"tox failed for: {', '.join(failed)}")


@nox.session
def package(session: nox.Session) -> None:
    """The release check a maintainer runs before publishing (sdk-docs: releasing.md).

    Builds every wheel and sdist into ./dist, runs ``twine check`` on them, then installs each
    package's wheel *alone* into a clean virtualenv of its own (``--find-links dist``, so a
    plugin's ``omni-core`` pin resolves to the wheel just built, and PyPI gives the rest) and
    checks that ``omni list-plugins`` there lists it, unbroken, with its version. Last, every
    wheel together (``pip install omni-core omni-wan ...`` as a user runs it) and
    ``omni new-plugin`` from the installed core (its templates ship in the wheel).
    """
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("build", "twine")
    for pkg in PACKAGES:
        session.run("python", "-m", "build", "--outdir", str(dist), str(pkg))
    wheels = {_dist_name(p): _wheel_of(dist, _dist_name(p)) for p in PACKAGES}
    sdists = sorted(dist.glob("*.tar.gz"))
    if len(sdists) != len(PACKAGES):
        session.error(f"expected {len(PACKAGES)} sdists, got {[s.name for s in sdists]}")
    session.run("twine", "check", "--strict", *map(str, [*wheels.values(), *sdists]))
    index = os.environ.get("OMNI_TORCH_INDEX_URL")
    for name, wheel in wheels.items():
        venv = Path(session.create_tmp()) / f"alone-{name}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run(sys.executable, "-m", "venv", str(venv), external=True)
        python = str(venv / "bin" / "python")
        torch_index = ["--extra-index-url", index] if index else []
        pip = [python, "-m", "pip", "install", "-q"]
        session.run(*pip, TORCH, *torch_index, external=True)
        session.run(*pip, "--find-links", str(dist), str(wheel), external=True)
        session.run(python, "-c", _LISTED.format(names=[name]), external=True)
    install_torch(session)
    session.install("--find-links", str(dist), *map(str, wheels.values()))
    session.run("omni", "list-plugins")
    session.run("python", "-c", _LISTED.format(names=sorted(wheels)))
    scratch = Path(session.create_tmp()) / "new-plugin"
    shutil.rmtree(scratch, ignore_errors=True)
    session.run("omni", "new-plugin", "wheel-probe", "--kind", "platform", "--output", str(scratch))


def _wheel_of(dist: Path, name: str) -> Path:
    found = sorted(dist.glob(f"{name.replace('-', '_')}-*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"expected one wheel of {name} in {dist}, found {found}")
    return found[0]


#: Run by the venv's python: each distribution named is listed by `omni list-plugins`, loaded,
#: at its own version, and omni_core comes from site-packages (not this checkout).
_LISTED = """
import json, subprocess, sys
from importlib import metadata
out = subprocess.run([sys.executable, '-m', 'omni_core.cli', 'list-plugins', '--json'],
                     check=True, capture_output=True, text=True).stdout
plugins = {{p['distribution']: p for p in json.loads(out)}}
for name in {names!r}:
    assert name in plugins, (name, sorted(plugins))
    row = plugins[name]
    assert row['status'] == 'ok', (name, row['error'])
    assert row['version'] == metadata.version(name), (name, row['version'])
import omni_core
assert 'site-packages' in omni_core.__file__, omni_core.__file__
print('listed from wheels:', ', '.join({names!r}))
"""


if __name__ == "__main__":  # pragma: no cover - `python noxfile.py` is not how to run it
    sys.exit("run: python3 -m pip install nox && nox -s tests")
