"""Quantizers (scope and bounded error) and regional compilation (region choice, equality with
eager, no recompiles within a shape bucket) on a tiny random Wan transformer."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from omni_core.contract.config import QuantizationConfig
from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration import apply_acceleration
from omni_core.diffusion.acceleration.compile import compile_repeated_blocks, find_repeated_blocks
from omni_core.diffusion.acceleration.quantization import (
    default_filter,
    fp8_linear_class,
    quantize_components,
)


def _tiny_wan(layers: int = 3) -> torch.nn.Module:
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=4,
        out_channels=4,
        text_dim=32,
        freq_dim=32,
        ffn_dim=64,
        num_layers=layers,
        rope_max_seq_len=32,
    ).eval()


def _inputs(frames: int = 2, size: int = 8) -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "hidden_states": torch.randn(1, 4, frames, size, size, generator=g),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": torch.randn(1, 6, 32, generator=g),
        "return_dict": False,
    }


def _run(model, **kw) -> torch.Tensor:
    with torch.no_grad():
        return model(**_inputs(**kw))[0]


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


@pytest.fixture(scope="session")
def reference() -> torch.Tensor:
    return _run(_tiny_wan())


def test_default_scope_is_block_linears_only():
    model = _tiny_wan()
    keep = default_filter(("blocks",))
    chosen = [n for n, m in model.named_modules() if keep(n, m)]
    assert chosen and all(n.startswith("blocks.") for n in chosen)
    assert "blocks.0.attn1.to_q" in chosen and "blocks.0.ffn.net.2" in chosen
    all_linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    left_out = set(all_linears) - set(chosen)
    # embedders, the time projection and the output head stay in full precision
    assert "proj_out" in left_out
    assert any("condition_embedder" in n for n in left_out)


def test_fp8_rowwise_error_bounded(registry, reference):
    model = _tiny_wan()
    (report,) = quantize_components(
        {"transformer": model, "vae": torch.nn.Linear(16, 16)},
        "fp8",
        ("transformer",),
        block_lists={"transformer": ("blocks",)},
        registry=registry,
    )
    cls = fp8_linear_class()
    assert report.linears == sum(isinstance(m, cls) for m in model.modules()) > 0
    assert isinstance(model.proj_out, torch.nn.Linear)  # output head untouched
    assert report.bytes_after < report.bytes_before
    err = _rel_err(_run(model), reference)
    assert 0 < err < 0.1, err


def test_fp8_linear_matches_dequantized_math():
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 48)
    q = fp8_linear_class()(linear)
    x = torch.randn(5, 32)
    w = q.qweight_t.float().t() * q.weight_scale.t()
    xs = x.abs().amax(dim=1, keepdim=True) / 448.0
    xq = (x / xs).to(torch.float8_e4m3fn).float() * xs
    torch.testing.assert_close(q(x), xq @ w.t() + linear.bias, rtol=1e-4, atol=1e-4)
    assert _rel_err(q(x), linear(x)) < 0.08


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao not installed")
def test_torchao_int8_weight_only_error_bounded(registry, reference):
    model = _tiny_wan()
    (report,) = quantize_components(
        {"transformer": model},
        "torchao-int8wo",
        ("transformer",),
        block_lists={"transformer": ("blocks",)},
        registry=registry,
    )
    assert report.linears > 0 and report.bytes_after < report.bytes_before
    err = _rel_err(_run(model), reference)
    assert 0 < err < 0.02, err


def test_quantizer_errors(registry):
    model = _tiny_wan()
    with pytest.raises(ConfigError, match="unknown quantizer"):
        quantize_components({"transformer": model}, "int3", ("transformer",), registry=registry)
    with pytest.raises(ConfigError, match="not in this pipeline"):
        quantize_components({"transformer": model}, "fp8", ("unet",), registry=registry)
    with pytest.raises(ConfigError, match="runs on cuda"):
        quantize_components(
            {"transformer": model},
            "torchao-fp8",
            ("transformer",),
            registry=registry,
            device_type="cpu",
        )


def test_torchao_availability_message(registry):
    from omni_core.diffusion.acceleration.quantization import torchao_available

    have = torchao_available()
    if importlib.util.find_spec("torchao") is None:
        assert not have.available and have.reason == "torchao not installed (pip install torchao)"
    else:
        assert have.available


def test_region_selection_uses_repeated_blocks():
    model = _tiny_wan(layers=3)
    blocks = find_repeated_blocks(model)
    assert [n for n, _ in blocks] == ["blocks.0", "blocks.1", "blocks.2"]

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
            self.head = torch.nn.Linear(4, 4)

    assert [n for n, _ in find_repeated_blocks(Plain())] == ["layers.0", "layers.1"]


def test_compiled_blocks_equal_eager_without_recompiles(reference):
    import torch._dynamo

    torch._dynamo.reset()
    model = _tiny_wan(layers=3)
    report = compile_repeated_blocks(model, backend="aot_eager")
    assert report.blocks == 3 and report.block_class == "WanTransformerBlock"
    out = _run(model)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    first = report.as_dict()
    assert first["buckets"] == 1 and first["compile_s"] > 0
    _run(model)  # same bucket: nothing new
    second = report.as_dict()
    assert second["buckets"] == 1
    assert second["recompiles"] == first["recompiles"]
    _run(model, size=12)  # a new size bucket compiles once
    assert report.as_dict()["buckets"] == 2


def test_apply_acceleration_orders_quantize_compile_cache(registry, reference):
    import torch._dynamo

    from omni_core.contract.config import CacheConfig
    from omni_core.contract.pipeline import PipelineOptions
    from omni_core.contract.platforms import current_platform

    torch._dynamo.reset()
    model = _tiny_wan()
    options = PipelineOptions(
        device=torch.device("cpu"),
        dtype=torch.float32,
        platform=current_platform(),
        quantization=QuantizationConfig(method="fp8"),
        cache=CacheConfig(backend="first-block", options={"threshold": 0.0}),
        extra={"compile": True, "compile_backend": "aot_eager"},
    )
    report = apply_acceleration({"transformer": model}, options, registry=registry)
    assert report.order == ["fuse_qkv", "quantize:fp8", "compile", "cache:first-block"]
    handle = report.caches["transformer"]
    with report.cache_context("transformer", "r:cond"):
        out = _run(model)
    assert _rel_err(out, reference) < 0.1
    assert report.finish(["r:cond"])["transformer"]["calls"] == 1
    d = report.as_dict()
    assert d["quantization"][0]["linears"] > 0 and d["compile"][0]["blocks"] == 3
    assert handle.backend == "first-block"


def test_apply_acceleration_validates_before_touching(registry):
    from omni_core.contract.config import CacheConfig
    from omni_core.contract.pipeline import PipelineOptions
    from omni_core.contract.platforms import current_platform

    model = _tiny_wan()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    options = PipelineOptions(
        device=torch.device("cpu"),
        dtype=torch.float32,
        platform=current_platform(),
        quantization=QuantizationConfig(method="fp8"),
        cache=CacheConfig(backend="no-such-cache"),
    )
    with pytest.raises(ConfigError, match="unknown cache backend"):
        apply_acceleration({"transformer": model}, options, registry=registry)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_core_fp8_refuses_rocm_builds(monkeypatch) -> None:
    """On a HIP build the e4m3fn quantizer would write the wrong fp8 format for MI300."""
    import torch

    from omni_core.diffusion.acceleration.quantization import fp8_available, torchao_fp8_available

    assert fp8_available().available  # CPU torch: float8 + _scaled_mm exist
    monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
    verdict = fp8_available()
    assert not verdict.available and "fp8-rocm" in verdict.reason
    if torchao_fp8_available().reason.startswith("torchao not installed"):
        return
    assert not torchao_fp8_available().available
