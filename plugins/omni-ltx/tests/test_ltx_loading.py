"""Loading: the official Hub id (Lightricks/LTX-2) resolves through huggingface-hub's cache
offline and renders what the local folder renders; weights other than safetensors are refused
with one clear error."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from omni_core import ConfigError, Omni

REPO = "Lightricks/LTX-2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
KW = {"height": 32, "width": 32, "num_frames": 5, "num_inference_steps": 2, "seed": 0}


def test_the_hub_id_loads_from_the_cache_offline(
    ltx_checkpoint: Path, ltx_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    repo = tmp_path / "hub" / ("models--" + REPO.replace("/", "--"))
    shutil.copytree(ltx_checkpoint, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    model = Omni(REPO, device="cpu", dtype="float32")
    assert model.spec.name == "ltx-2-t2v" and model.path.name == COMMIT
    ours = model.generate("a red cat", **KW)
    local = ltx_model.generate("a red cat", **KW)
    assert np.array_equal(ours.video, local.video) and np.array_equal(ours.audio, local.audio)


def test_pickled_weights_are_refused(ltx_checkpoint: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    folder = shutil.copytree(ltx_checkpoint, tmp_path / "pickled")
    weights = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    torch.save(load_file(weights), weights.with_suffix(".bin"))
    weights.unlink()
    with pytest.raises(ConfigError, match="safetensors only"):
        Omni(folder, device="cpu", dtype="float32")
