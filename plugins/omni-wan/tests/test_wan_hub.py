"""Hub ids resolve through huggingface-hub's cache, offline (HF_HUB_OFFLINE=1), and run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = "omni-test/tiny-wan"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hf_home(tiny_wan: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An HF_HOME whose hub cache holds REPO at COMMIT, in huggingface-hub's own layout."""
    home = tmp_path_factory.mktemp("hf_home")
    repo = home / "hub" / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(tiny_wan("t2v"), snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return home


def test_wan_hub_id_resolves_offline_in_a_fresh_process(hf_home: Path) -> None:
    """HF_HOME and HF_HUB_OFFLINE are read by huggingface-hub at import: use a fresh process
    (it imports no torch, so it is quick)."""
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    code = (
        "from omni_core.runtime.loading import resolve_model_path as r\n"
        f"print(r({REPO!r}))\n"
        "try:\n    r('omni-test/not-cached')\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    resolved, error = out.stdout.strip().splitlines()
    assert Path(resolved) == hf_home / "hub" / "models--omni-test--tiny-wan" / "snapshots" / COMMIT
    assert error.startswith("ModelNotFoundError")
    assert "not in the Hugging Face cache" in error


def test_wan_hub_id_generates(
    hf_home: Path, monkeypatch: pytest.MonkeyPatch, wan_kwargs: Any
) -> None:
    from huggingface_hub import constants

    from omni_core import Omni

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    model = Omni(REPO, device="cpu", dtype="float32")
    assert model.spec.name == "wan-t2v"
    assert model.path.name == COMMIT
    result = model.generate(**wan_kwargs("t2v", num_inference_steps=2, seed=0))
    assert result.video.shape == (9, 16, 32, 3)
