"""Packaging: plugins declare what their code paths import."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _requirements(pyproject: Path) -> set[str]:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps}


def test_integration_omni_wan_declares_ftfy() -> None:
    # omni_wan cleans prompts with diffusers' Wan prompt_clean, which uses ftfy when installed.
    source = (ROOT / "plugins/omni-wan/src/omni_wan/pipeline.py").read_text()
    assert "prompt_clean" in source
    assert "ftfy" in _requirements(ROOT / "plugins/omni-wan/pyproject.toml")
    pytest.importorskip("ftfy")
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    assert prompt_clean("  a  cat &amp; a dog ") == "a cat & a dog"
