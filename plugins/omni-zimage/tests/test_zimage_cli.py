"""The ``omni`` command line on Z-Image (in this process, through the test kit's ``run_cli``):
``omni generate image`` writes the image ``Omni`` makes, a size the model cannot make is one
line and exit 2 before any weights load, ``omni list-plugins`` names the plugin with its version.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from omni_core.testing import run_cli


def test_generate_image_writes_the_image_omni_makes(zimage_checkpoint, zimage_model, tmp_path):
    from PIL import Image

    out = tmp_path / "cat.png"
    args = ["--size", "80x48", "--steps", "2", "--seed", "11", "--guidance", "3.0"]
    args += ["--negative-prompt", "blurry", "--extra", "max_sequence_length=64"]
    args += ["--dtype", "float32", "--device", "cpu", "-o", str(out)]
    result = run_cli("generate", "image", str(zimage_checkpoint), "a red cat", *args)
    assert result.exit_code == 0, result.output
    expected = zimage_model.generate(
        "a red cat",
        width=80,
        height=48,
        num_inference_steps=2,
        seed=11,
        guidance_scale=3.0,
        negative_prompt="blurry",
        max_sequence_length=64,
    )
    written = np.asarray(Image.open(out).convert("RGB")).astype(int)
    assert written.shape == (48, 80, 3)
    assert np.abs(written - np.asarray(expected.images[0]).astype(int)).max() <= 1


def test_a_bad_size_exits_2_before_loading(zimage_checkpoint: Path, tmp_path: Path) -> None:
    """On the configs and tokenizer alone: a command that reached the weights would fail on
    their absence, not on the size."""
    configs = tmp_path / "configs"
    shutil.copytree(zimage_checkpoint, configs, ignore=shutil.ignore_patterns("*.safetensors"))
    out = tmp_path / "x.png"
    result = run_cli("generate", "image", str(configs), "a cat", "--size", "100x64", "-o", str(out))
    assert result.exit_code == 2, result.output
    assert "multiples of 16" in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_list_plugins_names_omni_zimage_with_its_version() -> None:
    import omni_zimage

    result = run_cli("list-plugins", "--json")
    assert result.exit_code == 0, result.output
    plugin = {p["name"]: p for p in json.loads(result.stdout)}["omni-zimage"]
    assert plugin["status"] == "ok" and plugin["distribution"] == "omni-zimage"
    assert plugin["version"] == omni_zimage.__version__ == "0.1.0"
    assert plugin["provides"]["pipelines"] == ["z-image"]
    assert plugin["provides"]["denoisers"] == ["z-image-transformer"]
