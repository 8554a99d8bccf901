"""Session fixtures: tiny checkpoints built once, pipelines loaded once per family."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_tts(tmp_path_factory):
    """``tiny_tts(family) -> Path``: the checkpoint of a family, built on first use."""
    from omni_tts.testing import build_tiny_tts

    root = tmp_path_factory.mktemp("tiny-tts")
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build_tiny_tts(root / family, family=family)
        return built[family]

    return get


@pytest.fixture(scope="session")
def omni_tts(tiny_tts):
    """``omni_tts(family) -> Omni`` loaded through the real registry, cached per family."""
    from omni_core import Omni

    loaded: dict[str, object] = {}

    def get(family: str):
        if family not in loaded:
            loaded[family] = Omni(tiny_tts(family))
        return loaded[family]

    return get
