"""Qwen-Image with LoRA adapters (per request, several at once, fused distills), offload and VAE
tiling, each against diffusers' own parts on the tiny checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

from omni_core import ConfigError, InvalidRequestError, Omni
from omni_core.testing import run_cli, vae_tiling_kwargs

KW = {"prompt": "a red cat on a mat", "height": 64, "width": 96, "num_inference_steps": 3}
CFG = {"negative_prompt": " ", "guidance_scale": 4.0}


def _pixels(image: Any) -> np.ndarray:
    return np.asarray(image).astype(np.int16)


def _assert_same(ours: Any, ref: Any) -> None:
    a, b = _pixels(ours), _pixels(ref)
    assert a.std() > 5, "degenerate image: the comparison would prove nothing"
    assert np.abs(a - b).max() <= 1, "more than 1/255 away from diffusers"


@pytest.fixture(scope="module")
def loras(qwen_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    import diffusers

    from omni_core.testing import build_tiny_lora

    root = tmp_path_factory.mktemp("qwen-lora")
    path = qwen_checkpoints["t2i"]
    out: dict[str, Path] = {}
    for seed, name in enumerate(("a", "b", "distill"), start=1):
        model = diffusers.QwenImageTransformer2DModel.from_pretrained(path / "transformer")
        meta = {"omni.num_inference_steps": "2", "omni.guidance_scale": "1.0"}
        out[name] = build_tiny_lora(
            model,
            root / f"{name}.safetensors",
            save=diffusers.QwenImagePipeline.save_lora_weights,
            seed=seed,
            std=0.3,
            metadata=meta if name == "distill" else None,
        )
    return out


def _reference(path: Path, adapters: dict[str, tuple[Path, float]], seed: int, **kw: Any) -> Any:
    import diffusers

    pipe = diffusers.QwenImagePipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    for name, (file, _) in adapters.items():
        pipe.load_lora_weights(str(file.parent), weight_name=file.name, adapter_name=name)
    if adapters:
        pipe.set_adapters(list(adapters), adapter_weights=[s for _, s in adapters.values()])
    kw = {("true_cfg_scale" if k == "guidance_scale" else k): v for k, v in kw.items()}
    return pipe(**kw, generator=torch.Generator("cpu").manual_seed(seed)).images[0]


def test_two_adapters_composed_with_cfg_match_diffusers(qwen_checkpoints, loras) -> None:
    path = qwen_checkpoints["t2i"]
    omni = Omni(path, lora={"a": str(loras["a"]), "b": {"path": str(loras["b"]), "scale": 0.5}})
    lora = [{"name": "a", "scale": 0.7}, {"name": "b"}]  # b at its loaded scale, 0.5
    ours = omni.generate(**KW, **CFG, seed=3, lora=lora).images[0]
    ref = _reference(path, {"a": (loras["a"], 0.7), "b": (loras["b"], 0.5)}, 3, **KW, **CFG)
    _assert_same(ours, ref)
    base = omni.generate(**KW, **CFG, seed=3).images[0]  # adapters off again: the base model
    _assert_same(base, _reference(path, {}, 3, **KW, **CFG))
    assert np.abs(_pixels(ours) - _pixels(base)).max() > 8
    assert omni.pipeline.accel.fused_qkv == {}  # QKV fusion would bypass the adapters


def test_mixed_adapters_in_one_run_never_share_a_step(qwen_checkpoints, loras) -> None:
    omni = Omni(qwen_checkpoints["t2i"], lora={"a": str(loras["a"]), "b": str(loras["b"])})
    requests = [{**KW, "seed": 1, "lora": "a"}, {**KW, "seed": 1, "lora": "b"}, {**KW, "seed": 1}]
    alone = [omni.generate(**r).images[0] for r in requests]
    calls: list[int] = []
    hook = omni.pipeline.transformer.register_forward_pre_hook(
        lambda m, a, k: calls.append(k["hidden_states"].shape[0]), with_kwargs=True
    )
    try:
        together = omni.generate_batch(requests)
    finally:
        hook.remove()
    assert calls == [1] * 3 * KW["num_inference_steps"], "requests of different adapters batched"
    for a, b in zip(together, alone, strict=True):
        assert np.array_equal(_pixels(a.images[0]), _pixels(b))


def test_fused_distill_matches_diffusers_fuse_lora_and_sets_defaults(qwen_checkpoints, loras):
    import diffusers

    path = qwen_checkpoints["t2i"]
    omni = Omni(path, lora={"distill": str(loras["distill"])}, fuse_lora="distill")
    adapters = omni.pipeline.adapters
    assert adapters.adapters == {} and adapters.fused["name"] == "distill"
    assert adapters.request_defaults() == {"num_inference_steps": 2, "guidance_scale": 1.0}
    request = omni.request("a red cat", height=64, width=96, seed=2)
    assert request.num_inference_steps == 2 and request.guidance_scale == 1.0
    (ours,) = omni.run([request])
    pipe = diffusers.QwenImagePipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    file = loras["distill"]
    pipe.load_lora_weights(str(file.parent), weight_name=file.name, adapter_name="distill")
    pipe.fuse_lora(lora_scale=1.0, adapter_names=["distill"])
    pipe.unload_lora_weights()
    ref = pipe(
        prompt="a red cat",
        height=64,
        width=96,
        num_inference_steps=2,
        true_cfg_scale=1.0,
        generator=torch.Generator("cpu").manual_seed(2),
    ).images[0]
    _assert_same(ours.images[0], ref)
    with pytest.raises(InvalidRequestError, match="fused into the weights"):
        omni.request("x", lora="distill")


def test_unknown_adapters_are_refused_by_name(qwen_checkpoints, loras) -> None:
    omni = Omni(qwen_checkpoints["t2i"], lora=[f"a={loras['a']}:0.9"])
    assert omni.pipeline.adapters.adapters["a"].scale == 0.9
    with pytest.raises(InvalidRequestError, match="'x', 'y'") as info:
        omni.request("p", lora=["a", "x", "y"])
    assert info.value.param == "lora"
    with pytest.raises(InvalidRequestError, match="named twice"):
        omni.request("p", lora=["a", "a"])
    plain = Omni(qwen_checkpoints["t2i"])
    with pytest.raises(InvalidRequestError, match="no LoRA adapters loaded"):
        plain.request("p", lora="a")
    with pytest.raises(ConfigError, match="fuse_lora"):
        Omni(qwen_checkpoints["t2i"], lora={"a": str(loras["a"])}, fuse_lora="b")
    with pytest.raises(ConfigError, match="does not take LoRA adapters"):  # never dropped
        Omni(qwen_checkpoints["t2i"], pipeline="diffusers", lora={"a": str(loras["a"])})
    with pytest.raises(ConfigError, match="safetensors only"):
        Omni(qwen_checkpoints["t2i"], lora={"a": str(loras["a"].with_suffix(".bin"))})


def test_lru_unloads_and_reloads_adapters_under_the_cap(qwen_checkpoints, loras) -> None:
    path = qwen_checkpoints["t2i"]
    lora = {"adapters": [{"name": n, "path": str(loras[n])} for n in ("a", "b")], "max_active": 1}
    omni = Omni(path, lora=lora)
    adapters = omni.pipeline.adapters
    assert list(adapters.loaded) == ["a"]
    first_a = omni.generate(**KW, seed=4, lora="a").images[0]
    b = omni.generate(**KW, seed=4, lora="b").images[0]
    assert list(adapters.loaded) == ["b"] and adapters.stats["evictions"] == 1
    peft = set(omni.pipeline.transformer.peft_config)
    assert peft == {"b"}, "the evicted adapter's PEFT layers are still in the model"
    again_a = omni.generate(**KW, seed=4, lora="a").images[0]
    assert np.array_equal(_pixels(first_a), _pixels(again_a)), "reloaded adapter differs"
    assert not np.array_equal(_pixels(first_a), _pixels(b))
    with pytest.raises(InvalidRequestError, match="at most 1 active"):
        omni.request("p", lora=["a", "b"])


def test_block_offload_is_bit_identical_and_streams_blocks(qwen_checkpoints, loras) -> None:
    """On CPU, host and device are one, so the hooks cannot move bytes: what is checked is that
    diffusers' group offloading is installed on every block, onloads each group in every
    step, and changes no number (LoRA adapters included)."""
    from diffusers.hooks.group_offloading import ModuleGroup

    path = qwen_checkpoints["t2i"]
    plain = Omni(path, lora={"a": str(loras["a"])})
    omni = Omni(path, lora={"a": str(loras["a"])}, offload="block")
    assert omni.pipeline.offload.components["transformer"].startswith("block")
    assert omni.pipeline.offload.components["text_encoder"] == "leaf"
    blocks = omni.pipeline.transformer.transformer_blocks
    assert all(b._diffusers_hook.get_hook("group_offloading") for b in blocks)
    onload = ModuleGroup.onload_
    with mock.patch.object(ModuleGroup, "onload_", autospec=True, side_effect=onload) as spy:
        ours = omni.generate(**KW, seed=5, lora="a").images[0]
    assert spy.call_count >= len(blocks) * KW["num_inference_steps"]
    assert np.array_equal(_pixels(ours), _pixels(plain.generate(**KW, seed=5, lora="a").images[0]))
    # with step batching: two requests share each offloaded forward, as they do without
    batch = [{**KW, "seed": 1}, {**KW, "seed": 2}]
    for a, b in zip(omni.generate_batch(batch), plain.generate_batch(batch), strict=True):
        assert np.array_equal(_pixels(a.images[0]), _pixels(b.images[0]))


def test_max_gpu_memory_picks_the_offload_mode(qwen_checkpoints) -> None:
    """Weights may take 80% of max_gpu_memory: all of them fit -> none, the largest component
    does -> model, else block (the sizes at the run dtype, float32 here, from the safetensors
    headers of every component)."""
    from omni_core.testing import weight_bytes

    path = qwen_checkpoints["t2i"]
    sizes = weight_bytes(path, ["text_encoder", "transformer", "vae"], 4)
    total, largest = sum(sizes.values()), max(sizes.values())
    assert total > largest * 1.05  # several components of real weight: "model" is possible
    gib = 2**30
    for budget, expected in (
        (total / 0.8 * 1.01, "none"),
        (largest / 0.8 * 1.01, "model"),
        (largest / 0.8 * 0.5, "block"),
    ):
        omni = Omni(path, max_gpu_memory=budget / gib, dtype="float32")
        assert omni.options.memory.offload == expected
        assert omni.pipeline.offload.mode == expected


def test_vae_tiling_auto_tiles_when_the_decode_would_not_fit(qwen_checkpoints) -> None:
    """auto asks the platform for free memory: a platform that reports too little gets a tiled
    decode, equal to diffusers' tiled decode; one that cannot tell (the CPU) never tiles."""
    import diffusers

    path = qwen_checkpoints["t2i"]
    omni = Omni(path, offload={"vae_tile": 64})
    plain = omni.generate(**KW, seed=6)
    assert plain.info["vae_tiled"] is False  # the CPU platform cannot tell: no tiling
    platform = omni.options.platform
    with mock.patch.object(type(platform), "free_memory_bytes", return_value=1024):
        tiled = omni.generate(**KW, seed=6)
    assert tiled.info["vae_tiled"] is True
    pipe = diffusers.QwenImagePipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    pipe.vae.enable_tiling(**vae_tiling_kwargs(64))
    ref = pipe(**KW, generator=torch.Generator("cpu").manual_seed(6)).images[0]
    _assert_same(tiled.images[0], ref)
    diff = np.abs(_pixels(tiled.images[0]) - _pixels(plain.images[0]))
    assert diff.max() > 0, "the tiles did not split the image"
    # Stated tolerance against the untiled decode (tiny random VAE, 64 px tiles): mean <= 6/255
    # (measured 4.8/255).
    assert diff.mean() <= 6.0, f"mean difference {diff.mean():.2f}/255"


def test_omni_generate_applies_its_loras_and_a_distills_defaults(
    qwen_checkpoints, loras, tmp_path: Path
) -> None:
    """`omni generate --lora` loads and applies the adapters (as Omni does); with --fuse-lora
    the distill's recommended steps become the default."""
    from PIL import Image

    path = qwen_checkpoints["t2i"]
    out = tmp_path / "cli.png"
    args = ["generate", "image", str(path), KW["prompt"], "--size", "96x64", "--steps", "3"]
    args += ["--seed", "8", "--lora", f"a={loras['a']}:0.6", "-o", str(out), "-q"]
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    omni = Omni(path, lora={"a": str(loras["a"])})
    ours = omni.generate(**KW, seed=8, lora=[{"name": "a", "scale": 0.6}]).images[0]
    assert np.array_equal(_pixels(Image.open(out).convert("RGB")), _pixels(ours))

    args = ["generate", "image", str(path), "x", "--size", "96x64", "--seed", "8", "-o", str(out)]
    args += ["--lora", f"d={loras['distill']}", "--fuse-lora", "d", "-q"]
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    distilled = Omni(path, lora={"d": str(loras["distill"])}, fuse_lora="d")
    expected = distilled.generate("x", height=64, width=96, seed=8).images[0]  # 2 steps, cfg 1
    assert np.array_equal(_pixels(Image.open(out).convert("RGB")), _pixels(expected))


def test_edit_encode_and_decode_tiled_match_diffusers_tiled(qwen_checkpoints, qwen_images):
    """vae_tiling=on tiles the input image's encode as well as the decode, as diffusers'
    enable_tiling does for QwenImageEditPipeline."""
    import diffusers

    from omni_qwen.compat import load_vl_processor

    path = qwen_checkpoints["edit"]
    image = qwen_images[0].resize((96, 64))
    kw = {"prompt": "make it blue", "height": 64, "width": 96, "num_inference_steps": 3}
    omni = Omni(path, offload={"vae_tiling": "on", "vae_tile": 64})
    ours = omni.generate(**kw, images=[image], seed=9).images[0]
    assert omni.pipeline.vae_memory.tiled_calls == 2  # the encode and the decode
    pipe = diffusers.QwenImageEditPipeline.from_pretrained(
        path, processor=load_vl_processor(path / "processor")
    )
    pipe.set_progress_bar_config(disable=True)
    pipe.vae.enable_tiling(**vae_tiling_kwargs(64))
    generator = torch.Generator("cpu").manual_seed(9)
    ref = pipe(**kw, image=image, generator=generator).images[0]
    _assert_same(ours, ref)
