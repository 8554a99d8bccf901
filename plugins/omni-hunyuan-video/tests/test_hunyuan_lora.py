"""HunyuanVideo-1.5 with a LoRA adapter per request, against diffusers' own PEFT integration
(``HunyuanVideo15Transformer3DModel.load_lora_adapter`` + ``set_adapters``) on the tiny
checkpoint; requests with and without the adapter batched; a fused adapter; a bad name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_core import InvalidRequestError, Omni

SMALL: dict[str, Any] = {"height": 32, "width": 48, "num_frames": 5, "num_inference_steps": 2}
PROMPT = "a red cat walks on the grass"
SCALE = 0.8


@pytest.fixture(scope="module")
def lora_file(hunyuan_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random rank-4 LoRA of the attention projections, in diffusers' file format
    (``transformer.``-prefixed PEFT keys and the adapter's metadata)."""
    import diffusers

    from omni_core.testing import build_tiny_lora

    model = diffusers.HunyuanVideo15Transformer3DModel.from_pretrained(
        hunyuan_checkpoint / "transformer"
    )
    path = tmp_path_factory.mktemp("hunyuan-lora") / "style.safetensors"
    # HunyuanVideo-1.5 has no pipeline LoRA mixin; HunyuanVideo's writes the same layout
    return build_tiny_lora(
        model, path, save=diffusers.HunyuanVideoPipeline.save_lora_weights, seed=1, std=0.3
    )


@pytest.fixture(scope="module")
def with_lora(hunyuan_checkpoint: Path, lora_file: Path) -> Omni:
    return Omni(hunyuan_checkpoint, device="cpu", dtype="float32", lora={"style": str(lora_file)})


def _reference(checkpoint: Path, lora_file: Path, reference_frames: Any, **kwargs: Any) -> Any:
    import diffusers

    pipe = diffusers.HunyuanVideo15Pipeline.from_pretrained(checkpoint)
    pipe.set_progress_bar_config(disable=True)
    pipe.transformer.load_lora_adapter(str(lora_file), prefix="transformer", adapter_name="style")
    pipe.transformer.set_adapters(["style"], [SCALE])
    return reference_frames(pipe, 3, 4.0, prompt=PROMPT, negative_prompt="blurry", **kwargs)


def test_a_lora_per_request_matches_diffusers(
    hunyuan_checkpoint, lora_file, with_lora, hunyuan_model, reference_frames, worst_difference
) -> None:
    fields = {**SMALL, "guidance_scale": 4.0, "negative_prompt": "blurry", "seed": 3}
    ours = with_lora.generate(PROMPT, **fields, lora=[{"name": "style", "scale": SCALE}])
    reference = _reference(hunyuan_checkpoint, lora_file, reference_frames, **SMALL)
    assert worst_difference(ours.video, reference) <= 1
    base = with_lora.generate(PROMPT, **fields)  # no adapter named: the base model
    plain = hunyuan_model.generate(PROMPT, **fields)
    assert np.array_equal(base.video, plain.video)
    assert np.abs(ours.video.astype(np.int16) - base.video.astype(np.int16)).max() > 8


def test_requests_with_and_without_the_adapter_batched(with_lora) -> None:
    """Batched, the two adapter sets never share a step (the step key holds the request's
    adapters and scales) and each request gets what it gets alone."""
    pipeline = with_lora.pipeline
    asks = [
        {"seed": 4, "lora": [{"name": "style", "scale": SCALE}]},
        {"seed": 4},
        {"seed": 5, "lora": [{"name": "style", "scale": SCALE}]},
        {"seed": 6},
    ]
    alone = [with_lora.generate(PROMPT, **SMALL, **a).video for a in asks]
    groups: list[tuple[set[Any], int]] = []
    step = pipeline.step

    def recorded(states: list[Any]) -> None:
        groups.append(({s.request.lora_key() for s in states}, len(states)))
        step(states)

    pipeline.step = recorded  # type: ignore[method-assign]
    try:
        together = with_lora.run([with_lora.request(PROMPT, **SMALL, **a) for a in asks])
    finally:
        del pipeline.step
    assert all(len(keys) == 1 for keys, _ in groups)  # one adapter set per step
    # two groups a step (with and without the adapter), two requests in each
    assert [n for _, n in groups] == [2] * 2 * SMALL["num_inference_steps"]
    for got, want in zip(together, alone, strict=True):
        assert np.abs(got.video.astype(np.int16) - want.astype(np.int16)).max() <= 1


def test_an_unknown_adapter_is_refused(with_lora) -> None:
    with pytest.raises(InvalidRequestError, match="nope"):
        with_lora.request(PROMPT, **SMALL, lora=[{"name": "nope"}])


def test_a_fused_adapter_is_the_per_request_one(
    hunyuan_checkpoint, lora_file, with_lora, worst_difference
) -> None:
    fused = Omni(
        hunyuan_checkpoint,
        device="cpu",
        dtype="float32",
        lora={"style": str(lora_file)},
        fuse_lora="style",
    )
    ours = fused.generate(PROMPT, **SMALL, seed=6)
    per_request = with_lora.generate(PROMPT, **SMALL, seed=6, lora=[{"name": "style"}])
    assert worst_difference(ours.video, per_request.video.astype(np.float64)) <= 1
