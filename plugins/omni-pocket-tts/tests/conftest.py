"""One tiny Pocket TTS checkpoint and one loaded pipeline for the whole session (CI has 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omni_core import Omni

from omni_pocket_tts.testing import build_tiny_pocket_tts


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_pocket_tts(tmp_path_factory.mktemp("pocket") / "tiny")


@pytest.fixture(scope="session")
def omni(checkpoint: Path) -> Omni:
    return Omni(checkpoint, device="cpu")
