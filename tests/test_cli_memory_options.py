"""The memory flags of `omni serve` / `omni generate` (commands/memory_options.py): what they
become, and the mistakes they refuse in one line with exit code 2, before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from omni_core.cli import cli
from omni_core.commands.memory_options import memory_kwargs
from omni_core.contract.config import parse_lora_spec
from omni_core.contract.errors import ConfigError


@pytest.fixture()
def lora_file(tmp_path: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "style.safetensors"
    save_file({"transformer.x.lora_A.weight": torch.zeros(2, 2)}, str(path))
    return path


def test_lora_spec_forms() -> None:
    assert parse_lora_spec("a=./x.safetensors") == {"name": "a", "path": "./x.safetensors"}
    assert parse_lora_spec("a=./x.safetensors:0.5") == {
        "name": "a",
        "path": "./x.safetensors",
        "scale": 0.5,
    }
    assert parse_lora_spec("b=owner/repo") == {"name": "b", "path": "owner/repo"}
    with pytest.raises(ConfigError, match="NAME=PATH"):
        parse_lora_spec("no-equals")


def test_flags_become_omni_keywords(lora_file: Path) -> None:
    kwargs = memory_kwargs(
        lora_specs=(f"a={lora_file}:0.7", f"d={lora_file}"),
        fuse_lora="d",
        lora_steps=8,
        lora_max_active=2,
        offload="block",
        offload_blocks=2,
        vae_tiling="on",
        vae_tile=256,
    )
    assert kwargs["lora"] == {
        "adapters": (
            {"name": "a", "path": str(lora_file), "scale": 0.7},
            {"name": "d", "path": str(lora_file)},
        ),
        "fuse": "d",
        "max_active": 2,
        "steps": 8,
    }
    assert kwargs["offload"] == {
        "offload": "block",
        "blocks_per_group": 2,
        "vae_tiling": "on",
        "vae_tile": 256,
    }
    assert memory_kwargs() == {}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--lora", "a=/nonexistent/x.safetensors"], "no such file or folder"),
        (["--lora", "a=./model.bin"], "safetensors only"),
        (["--lora", "broken"], "NAME=PATH"),
        (["--fuse-lora", "a"], "need at least one --lora"),
        (["--offload", "sideways"], "sideways"),
        (["--max-gpu-memory", "0"], "max-gpu-memory"),
    ],
)
def test_serve_refuses_bad_memory_flags_before_loading(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(cli, ["serve", "/nonexistent-model", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


def test_serve_refuses_lora_set_twice(lora_file: Path) -> None:
    option = "lora=" + json.dumps({"adapters": [{"name": "a", "path": str(lora_file)}]})
    result = CliRunner().invoke(
        cli, ["serve", "/nonexistent-model", "--lora", f"a={lora_file}", "--option", option]
    )
    assert result.exit_code == 2 and "set twice" in result.output, result.output


def test_fuse_lora_must_name_a_lora(lora_file: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "generate",
            "image",
            "/nonexistent-model",
            "x",
            "--lora",
            f"a={lora_file}",
            "--fuse-lora",
            "b",
        ],
    )
    assert result.exit_code == 2 and "'b' is not one of the --lora names" in result.output
