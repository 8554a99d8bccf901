"""One tiny Dia checkpoint and one loaded pipeline for the whole session (CI has 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omni_core import Omni

from omni_dia.testing import build_tiny_dia


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_dia(tmp_path_factory.mktemp("dia") / "tiny")


@pytest.fixture(scope="session")
def omni(checkpoint: Path) -> Omni:
    return Omni(checkpoint, device="cpu")
