"""The generic diffusers adapter serves a pipeline no plugin claims, as diffusers runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_core.contract.errors import InvalidRequestError, ModelNotFoundError


@pytest.fixture(scope="module")
def ddpm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny unconditional DDPMPipeline in diffusers' layout (random weights)."""
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=16,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    path = tmp_path_factory.mktemp("ddpm")
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def adapter_model(ddpm: Path) -> Any:
    from omni_core import Omni
    from omni_core.testing import isolated_host

    with isolated_host():  # built-ins only: no first-class plugin, so the fallback serves it
        yield Omni(ddpm, device="cpu", dtype="float32")


def test_runtime_adapter_is_the_fallback(adapter_model: Any) -> None:
    assert adapter_model.spec.name == "diffusers"
    assert adapter_model.spec.fallback
    assert not adapter_model.spec.capabilities.step_batching


def test_runtime_adapter_matches_diffusers(ddpm: Path, adapter_model: Any) -> None:
    from diffusers import DDPMPipeline

    pipe = DDPMPipeline.from_pretrained(ddpm)
    pipe.set_progress_bar_config(disable=True)
    expected = pipe(
        num_inference_steps=3, generator=torch.Generator("cpu").manual_seed(3), output_type="pil"
    ).images[0]
    result = adapter_model.generate(num_inference_steps=3, seed=3)
    assert result.video is None and len(result.images) == 1
    ours = np.asarray(result.images[0]).astype(int)
    assert np.abs(ours - np.asarray(expected).astype(int)).max() <= 1
    assert ours.std() > 1
    # The UNet's processors call SDPA directly: reported as not routed, not silently claimed.
    assert result.info["attention"]["skipped"]
    assert result.info["seed"] == 3


def test_runtime_adapter_rejects_bad_arguments(adapter_model: Any) -> None:
    with pytest.raises(InvalidRequestError, match=r"unknown extra 'strength'.*batch_size"):
        adapter_model.request(strength=0.5)
    with pytest.raises(InvalidRequestError, match="set by omni itself"):
        adapter_model.request(output_type="latent")
    with pytest.raises(InvalidRequestError, match="takes no guidance_scale"):
        adapter_model.request(guidance_scale=3.0)
    with pytest.raises(InvalidRequestError, match="takes no conditioning image"):
        from PIL import Image

        adapter_model.request(images=[Image.new("RGB", (8, 8))])


def test_runtime_adapter_refuses_unknown_classes(tmp_path: Path) -> None:
    from omni_core import Omni
    from omni_core.testing import isolated_host

    (tmp_path / "model_index.json").write_text('{"_class_name": "MyCustomPipeline"}')
    with isolated_host(), pytest.raises(ModelNotFoundError, match="no pipeline class"):
        Omni(tmp_path, device="cpu")


def test_runtime_adapter_precheck_needs_no_weights(ddpm: Path) -> None:
    """The CLI's check before loading: from the class's __call__ signature alone."""
    from omni_core.contract.types import GenerationRequest
    from omni_core.diffusion.generic import DiffusersAdapterPipeline

    ok = DiffusersAdapterPipeline.precheck(ddpm, GenerationRequest(extras={"batch_size": 1}))
    assert ok.extras == {"batch_size": 1}
    with pytest.raises(InvalidRequestError, match="takes no guidance_scale"):
        DiffusersAdapterPipeline.precheck(ddpm, GenerationRequest(guidance_scale=2.0))
    with pytest.raises(InvalidRequestError, match="unknown extra 'foo'"):
        DiffusersAdapterPipeline.precheck(ddpm, GenerationRequest(extras={"foo": 1}))
