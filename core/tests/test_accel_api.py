"""Backends are registered through the hooks and selected by configuration end to end:
``Omni(model, cache=..., quantization=..., attention=...)`` on a toy staged pipeline that calls
``apply_acceleration`` exactly as the model plugins do; plus the extra attention backends."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from omni_core.contract.errors import ConfigError
from omni_core.contract.host import PluginHost
from omni_core.contract.pipeline import DenoiseState, PipelineOptions, StagedPipeline
from omni_core.contract.registry import PipelineCapabilities, PipelineSpec
from omni_core.contract.types import GenerationRequest, GenerationResult
from omni_core.diffusion.acceleration import AccelerationReport, apply_acceleration
from omni_core.diffusion.acceleration.quality import psnr

STEPS = 6


class AccelToyPipeline(StagedPipeline):
    """A minimal staged pipeline around a diffusers Wan transformer (the integration pattern)."""

    def __init__(self, transformer: torch.nn.Module, options: PipelineOptions) -> None:
        self.transformer = transformer
        self.options = options
        self.accel: AccelerationReport = apply_acceleration({"transformer": transformer}, options)

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> AccelToyPipeline:
        from diffusers import WanTransformer3DModel

        model = (
            WanTransformer3DModel.from_pretrained(path / "transformer").to(options.device).eval()
        )
        return cls(model, options)

    def prepare(self, request: GenerationRequest) -> DenoiseState:
        g = torch.Generator("cpu").manual_seed(request.seed or 0)
        state = DenoiseState(request=request, num_steps=request.num_inference_steps or STEPS)
        state.data["latents"] = torch.randn(1, 4, 2, 8, 8, generator=g)
        state.data["text"] = torch.randn(1, 6, 16, generator=g)
        state.data["timesteps"] = torch.linspace(999, 50, state.num_steps)
        return state

    def step(self, states: list[DenoiseState]) -> None:
        for state in states:
            t = state.data["timesteps"][state.step_index].reshape(1)
            name = f"{state.request.request_id}:cond"
            with self.accel.cache_context("transformer", name), torch.no_grad():
                v = self.transformer(
                    hidden_states=state.data["latents"],
                    timestep=t,
                    encoder_hidden_states=state.data["text"],
                    return_dict=False,
                )[0]
            state.data["latents"] = state.data["latents"] - v / state.num_steps
            state.step_index += 1

    def decode(self, state: DenoiseState) -> GenerationResult:
        cache = self.accel.finish([f"{state.request.request_id}:cond"])
        frames = state.data["latents"][0, :3].permute(1, 2, 3, 0)  # F x H x W x 3
        video = ((frames.clamp(-1, 1) + 1) * 127.5).to(torch.uint8).numpy()
        return GenerationResult(
            video=video, fps=8, info={"cache": cache, "accel": self.accel.as_dict()}
        )


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory) -> Path:
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("accel_toy")
    WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=16,
        ffn_dim=64,
        num_layers=3,
        rope_max_seq_len=32,
    ).save_pretrained(path / "transformer")
    (path / "model_index.json").write_text(json.dumps({"_class_name": "AccelToyPipeline"}))
    return path


@pytest.fixture(scope="module")
def toy_host():
    from omni_core import DenoiserSpec, hookimpl
    from omni_core.contract.host import set_host
    from omni_core.diffusion import DenoiserAdapter

    module = types.ModuleType("omni_accel_toy")
    module.AccelToyPipeline = AccelToyPipeline
    # What the toy's model plugin knows about its denoiser class: where the blocks are and that
    # QKV fusion is exact (diffusers' Wan processors honour fused projections).
    module.WAN_ADAPTER = DenoiserAdapter(
        architecture="WanTransformer3DModel", blocks=("blocks",), fuse_qkv=True
    )
    sys.modules["omni_accel_toy"] = module

    class ToyPlugin:
        @hookimpl
        def omni_register_pipelines(self, register):
            register(
                PipelineSpec(
                    name="accel-toy",
                    tasks=("t2v",),
                    architectures=("AccelToyPipeline",),
                    implementation="omni_accel_toy:AccelToyPipeline",
                    capabilities=PipelineCapabilities(
                        cache_backends=("first-block", "teacache", "taylorseer"),
                        quantizers=("fp8", "torchao-int8wo"),
                    ),
                )
            )

        @hookimpl
        def omni_register_denoisers(self, register):
            register(
                DenoiserSpec(
                    name="accel-toy-wan",
                    architectures=("WanTransformer3DModel",),
                    implementation="omni_accel_toy:WAN_ADAPTER",
                )
            )

    host = PluginHost(autoload=False)
    host.register_object("accel-toy", ToyPlugin())
    previous = set_host(host)
    yield host
    set_host(previous)
    sys.modules.pop("omni_accel_toy", None)


def test_builtins_register_every_backend():
    host = PluginHost(autoload=False)
    reg = host.registry
    assert {"first-block", "taylorseer", "magcache", "teacache", "dbcache"} <= set(
        reg.cache_backends
    )
    assert {"fp8", "torchao-fp8", "torchao-int8wo"} <= set(reg.quantizers)
    assert {"sdpa-auto", "flash-attn", "flash-attn3", "sage"} <= set(reg.attention_backends)
    assert reg.cache_backends["teacache"].plugin == "omni-cache"
    assert reg.quantizers["fp8"].plugin == "omni-quantizers"
    assert all(spec.lossy for spec in reg.cache_backends.values())


def test_optional_backends_say_why_not():
    from omni_core.diffusion.acceleration.cache import dbcache_available
    from omni_core.runtime.kernels.external import (
        flash_attn2_available,
        flash_attn3_available,
        sage_available,
    )

    for check, what in (
        (dbcache_available, "cache-dit not installed"),
        (flash_attn2_available, "flash-attn not installed"),
        (flash_attn3_available, "not installed"),
        (sage_available, "sageattention not installed"),
    ):
        have = check()
        assert not have.available and what in have.reason


def _generate(toy_checkpoint, **kw):
    from omni_core.api import Omni

    omni = Omni(toy_checkpoint, **kw)
    return omni, omni.generate("a cat", seed=3, num_inference_steps=STEPS)


def test_omni_selects_cache_quantizer_attention(toy_host, toy_checkpoint):
    _, ref = _generate(toy_checkpoint)
    assert ref.info["cache"] == {}
    _, exact = _generate(
        toy_checkpoint, cache={"backend": "first-block", "options": {"threshold": 0.0}}
    )
    np.testing.assert_array_equal(exact.video, ref.video)
    assert exact.info["cache"]["transformer"] == {
        "backend": "first-block",
        "calls": STEPS,
        "hits": 0,
        "hit_rate": 0.0,
    }
    _omni, lossy = _generate(
        toy_checkpoint,
        cache={"backend": "teacache", "options": {"threshold": 5.0}},
        quantization="fp8",
        attention="sdpa-auto",
    )
    info = lossy.info["accel"]
    assert info["order"] == ["fuse_qkv", "quantize:fp8", "cache:teacache"]
    assert info["attention"] == {"self": "sdpa-auto", "cross": "sdpa-auto", "joint": "sdpa-auto"}
    assert lossy.info["cache"]["transformer"]["hits"] > 0
    assert psnr(ref.video, lossy.video) > 5  # lossy, measured, not garbage


def test_omni_rejects_unsupported_or_unknown(toy_host, toy_checkpoint):
    from omni_core.api import Omni

    with pytest.raises(ConfigError, match="not supported by this pipeline"):
        Omni(toy_checkpoint, cache="magcache")
    with pytest.raises(ConfigError, match="unknown quantizer"):
        Omni(toy_checkpoint, quantization="int2")
    with pytest.raises(ConfigError, match="not supported by this pipeline"):
        Omni(toy_checkpoint, quantization="torchao-fp8")


def test_sdpa_auto_matches_sdpa_and_picks_by_shape(monkeypatch):
    from omni_core.runtime.kernels import sdpa as ax
    from omni_core.runtime.kernels.sdpa import sdpa

    q, k, v = (torch.randn(1, 20, 2, 16) for _ in range(3))
    torch.testing.assert_close(ax.sdpa_auto(q, k, v), sdpa(q, k, v))
    monkeypatch.setattr(ax, "_cuda_kernels", lambda: (True, True))
    bf16 = torch.bfloat16
    assert (
        ax.choose_sdpa_kernel((1, 75600, 24, 128), (1, 75600, 24, 128), bf16, "cuda", False)
        == "cudnn"
    )
    assert (
        ax.choose_sdpa_kernel((1, 1024, 24, 128), (1, 512, 24, 128), bf16, "cuda", False) == "flash"
    )
    assert (
        ax.choose_sdpa_kernel((1, 75600, 24, 128), (1, 512, 24, 128), bf16, "cuda", True)
        == "default"
    )
    assert (
        ax.choose_sdpa_kernel(
            (1, 75600, 24, 128), (1, 75600, 24, 128), torch.float32, "cuda", False
        )
        == "default"
    )
    assert (
        ax.choose_sdpa_kernel((1, 75600, 24, 128), (1, 75600, 24, 128), bf16, "cpu", False)
        == "default"
    )
    monkeypatch.setattr(ax, "_cuda_kernels", lambda: (False, True))
    assert (
        ax.choose_sdpa_kernel((1, 75600, 24, 128), (1, 75600, 24, 128), bf16, "cuda", False)
        == "flash"
    )


def test_finish_request_covers_batched_contexts():
    from omni_core.diffusion import DenoiserAdapter
    from omni_core.diffusion.acceleration import cache_key
    from omni_core.diffusion.acceleration.cache import CacheHandle

    handle = CacheHandle(
        backend="x", module=torch.nn.Linear(2, 2), adapter=DenoiserAdapter("X"), probe=lambda: True
    )
    report = AccelerationReport(caches={"transformer": handle})
    for key in (cache_key(["a", "b"], "cond"), cache_key(["a", "b"], "uncond"), cache_key(["c"])):
        with handle.context(key):
            handle.record()
    assert report.finish_request("a")["transformer"] == {
        "backend": "x",
        "calls": 2,
        "hits": 2,
        "hit_rate": 1.0,
    }
    assert handle.contexts() == ["c"]
    assert report.finish_request("b")["transformer"]["calls"] == 0
