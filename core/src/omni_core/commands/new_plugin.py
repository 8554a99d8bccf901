"""`omni new-plugin NAME --kind KIND`: write a pip-installable plugin package to start from.

The package has a pyproject with the ``omni`` entry point, a ``plugin.py`` whose hook registers a
spec of the chosen kind, the implementation module that spec points at, README, CHANGELOG,
tox.ini and a first test: "my plugin is discoverable and its specs validate". The attention,
cache and quantizer kinds also get the comparison their implementation promises (against torch's
SDPA, the uncached module, the full-precision model) and depend on torch alone, not the runtime.

The ``model`` kind is a complete staged pipeline around a small diffusion transformer
(``denoiser.py``), with a ``testing.py`` that writes a tiny random-weight checkpoint and a test
that generates through ``Omni(...)``: step batching, step caches, fused QKV, regional compile
and CFG/Ulysses parallelism all apply to it through the hooks and ``import omni_core`` alone.
The ``speech`` and ``chat`` kinds are autoregressive pipelines in the same spirit (an
``AutoregressiveSpeechPipeline`` over a transformers decoder with a code predictor and a codec;
an ``AutoregressiveChatPipeline`` over a transformers causal LM): their ``testing.py`` builds a
tiny checkpoint and holds the plain one-request loop the runtime must reproduce, and their tests
check it alone, batched by the engine and served by ``omni serve`` to the ``openai`` client.

Templates live in ``templates/plugin``: ``common/`` for every kind, ``kinds/<kind>/`` for one
kind (its files go to ``src/<module>/``, except those under ``tests/``, which go to ``tests/``).
"""

from __future__ import annotations

import importlib.util
import keyword
import re
from importlib import resources
from pathlib import Path

import click

#: kind -> (hook, registry attribute, implementation module, singular noun, needs torch)
KINDS: dict[str, tuple[str, str, str, str, bool]] = {
    "model": ("omni_register_pipelines", "pipelines", "pipeline", "pipeline", True),
    "platform": ("omni_register_platforms", "platforms", "platform", "platform", False),
    "attention": (
        "omni_register_attention_backends",
        "attention_backends",
        "attention",
        "attention backend",
        True,
    ),
    "cache": ("omni_register_cache_backends", "cache_backends", "cache", "cache backend", True),
    "quantizer": ("omni_register_quantizers", "quantizers", "quantizer", "quantizer", True),
    "speech": ("omni_register_pipelines", "pipelines", "pipeline", "speech pipeline", True),
    "chat": ("omni_register_pipelines", "pipelines", "pipeline", "chat pipeline", True),
}

#: Kinds that are pipelines: they need omni-core's runtime extra (torch, diffusers, transformers).
PIPELINE_KINDS = ("model", "speech", "chat")
#: Kinds whose tests serve the model with ``omni serve`` and ask it through the ``openai`` client.
SERVED_KINDS = ("speech", "chat")


#: The omni-core range a generated plugin depends on: this minor (0.x: minors may break).
def core_range() -> str:
    """The omni-core range a new plugin depends on: this release's minor series."""
    from omni_core.contract.version import __version__

    major, minor = (int(p) for p in __version__.split(".")[:2])
    return f">={major}.{minor},<{major}.{minor + 1}"


_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
TEMPLATE_ROOT = "templates/plugin"


def names_for(name: str) -> dict[str, str]:
    """Distribution, import and spec names derived from NAME (``omni-foo`` or ``foo``)."""
    dist = name if name.startswith("omni-") else f"omni-{name}"
    module = dist.replace("-", "_")
    short = dist.removeprefix("omni-")
    class_name = "".join(part.capitalize() for part in short.split("-"))
    return {
        "dist": dist,
        "module": module,
        "spec_name": short,
        "class_name": class_name,
        "snake_name": short.replace("-", "_"),
        "device_type": short.replace("-", "").replace("platform", "") or "device",
    }


def validate_name(name: str) -> dict[str, str]:
    if not _NAME.match(name):
        raise click.BadParameter(
            "use lower-case letters, digits and single dashes, starting with a letter "
            "(e.g. 'my-attention' or 'omni-my-attention')",
            param_hint="NAME",
        )
    names = names_for(name)
    if names["dist"] == "omni-core" or keyword.iskeyword(names["module"]):
        raise click.BadParameter(f"{name!r} is reserved", param_hint="NAME")
    try:
        taken = importlib.util.find_spec(names["module"]) is not None
    except (ImportError, ValueError):
        taken = True
    if taken:
        raise click.BadParameter(
            f"a module named {names['module']!r} is already installed; choose another name",
            param_hint="NAME",
        )
    return names


def requirements(kind: str, needs_torch: bool) -> list[str]:
    """What a generated package depends on: the runtime extra only for a pipeline (it needs
    diffusers or transformers; a chat model's tokenizer is built with tokenizers), torch alone
    for a kernel kind, omni-core alone otherwise."""
    if kind in PIPELINE_KINDS:
        extra = ["tokenizers>=0.19"] if kind == "chat" else []
        return [f"omni-core[runtime]{core_range()}", *extra]
    return [f"omni-core{core_range()}", *(["torch>=2.4"] if needs_torch else [])]


def testing_requirements(kind: str) -> list[str]:
    """The ``test`` extra: pytest, and for a served kind the server and the clients its tests
    use (a real ``omni serve``, the official ``openai`` client, httpx for /health)."""
    if kind in SERVED_KINDS:
        return ["pytest>=8", f"omni-core[serve]{core_range()}", "openai>=1.40", "httpx>=0.27"]
    return ["pytest>=8"]


def render(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    leftover = re.search(r"\{\{\w+\}\}", text)
    if leftover:  # a template bug, not a user error
        raise RuntimeError(f"template placeholder {leftover.group()} was not filled")
    return text


def write_plugin(name: str, kind: str, output: Path) -> Path:
    """Write the package for ``name`` into ``output/<dist>``; returns that directory."""
    from omni_core import PLUGIN_API_VERSION

    names = validate_name(name)
    hook, kind_attr, impl_module, singular, needs_torch = KINDS[kind]
    target = output / names["dist"]
    if target.exists():
        raise click.UsageError(f"{target} already exists; choose another NAME or --output")
    values = {
        **names,
        "kind": kind,
        "kind_singular": singular,
        "kind_attr": kind_attr,
        "hook": hook,
        "impl_module": impl_module,
        "api": PLUGIN_API_VERSION,
        "description": f"The {names['spec_name']} {singular} for omni.",
        "dependencies": ", ".join(f'"{d}"' for d in requirements(kind, needs_torch)),
        "test_dependencies": ", ".join(f'"{d}"' for d in testing_requirements(kind)),
        "core_range": core_range(),
    }
    root = resources.files("omni_core").joinpath(TEMPLATE_ROOT)
    files: dict[str, str] = {}
    for folder, prefix in ((root.joinpath("common"), ""), (root.joinpath("kinds", kind), None)):
        for path, text in _walk(folder):
            in_package = prefix is None and not path.startswith("tests/")
            relative = f"src/__module__/{path}" if in_package else path
            files[relative.replace("__module__", names["module"])] = render(text, values)
    target.mkdir(parents=True)
    for relative, text in sorted(files.items()):
        destination = target / relative.removesuffix(".tmpl")
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text, encoding="utf-8")
    return target


def _walk(folder, prefix: str = "") -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            out += _walk(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(".tmpl"):
            out.append((f"{prefix}{entry.name}", entry.read_text(encoding="utf-8")))
    return out


@click.command("new-plugin")
@click.argument("name")
@click.option(
    "--kind",
    type=click.Choice(sorted(KINDS)),
    required=True,
    help="What the plugin provides.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Directory to create the package in.",
)
def new_plugin(name: str, kind: str, output: Path) -> None:
    """Create a pip-installable plugin package NAME (distribution omni-NAME)."""
    target = write_plugin(name, kind, output)
    names = names_for(name)
    click.echo(f"Created {target} ({kind} plugin {names['dist']}, import {names['module']}).")
    click.echo("Next:")
    click.echo(f"  pip install -e '{target}[test]'")
    click.echo(f"  omni list-plugins          # shows {names['dist']}")
    click.echo(f"  pytest {target / 'tests'}")
