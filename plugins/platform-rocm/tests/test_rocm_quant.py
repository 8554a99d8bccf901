"""fp8-rocm: the fp8 format (and its range) follows the GPU; numerics checked on CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from omni_core import ConfigError
from omni_core.testing import quantize_components
from omni_platform_rocm.quant import RocmFp8Quantizer, fp8_linear_class


def tiny_denoiser() -> torch.nn.Module:
    torch.manual_seed(0)
    block = torch.nn.ModuleDict(
        {"attn": torch.nn.Linear(64, 64), "ff": torch.nn.Linear(64, 128, bias=False)}
    )
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([block])
    model.proj_out = torch.nn.Linear(128, 16)
    return model


def run(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    block = model.blocks[0]
    return model.proj_out(F.gelu(block.ff(block.attn(x))))


@pytest.mark.parametrize(
    ("dtype", "fp8_max"), [("float8_e4m3fnuz", 240.0), ("float8_e4m3fn", 448.0)]
)
def test_rocm_fp8_linears_in_the_given_format(dtype: str, fp8_max: float) -> None:
    model = tiny_denoiser()
    x = torch.randn(2, 12, 64)
    reference = run(model, x)
    report = RocmFp8Quantizer(dtype).quantize(
        model, lambda name, m: name.startswith("blocks."), "transformer"
    )
    assert report.linears == 2 and report.skipped == 1  # proj_out kept in full precision
    assert report.bytes_after < report.bytes_before
    attn = model.blocks[0]["attn"]
    assert isinstance(attn, fp8_linear_class())
    assert attn.qweight_t.dtype == getattr(torch, dtype)
    # every row uses its format's full range, and never more
    torch.testing.assert_close(attn.qweight_t.float().abs().amax(dim=0), torch.full((64,), fp8_max))
    assert isinstance(model.proj_out, torch.nn.Linear)
    out = run(model, x)
    assert F.cosine_similarity(out.flatten(), reference.flatten(), dim=0) > 0.995


def test_rocm_fp8_format_comes_from_the_gpu(make_machine) -> None:
    for arch, expected in (("gfx942", torch.float8_e4m3fnuz), ("gfx950", torch.float8_e4m3fn)):
        make_machine(archs=(arch,))
        model = tiny_denoiser()
        RocmFp8Quantizer().quantize(model, lambda n, m: n.startswith("blocks."), "transformer")
        assert model.blocks[0]["ff"].qweight_t.dtype == expected
    make_machine(archs=("gfx90a",))
    with pytest.raises(ConfigError, match="gfx90a has none"):
        RocmFp8Quantizer().quantize(tiny_denoiser(), lambda n, m: True, "transformer")


def test_rocm_fp8_through_the_core_quantizer_entry(rocm_host, mi300) -> None:
    model = tiny_denoiser()
    reports = quantize_components(
        {"transformer": model, "vae": None},
        "fp8-rocm",
        ("transformer",),
        block_lists={"transformer": ("blocks",)},
        registry=rocm_host.registry,
        device_type="cuda",
    )
    assert [r.linears for r in reports] == [2]
    assert model.blocks[0]["attn"].qweight_t.dtype == torch.float8_e4m3fnuz
    with pytest.raises(ConfigError, match="runs on cuda, not on cpu"):
        quantize_components(
            {"transformer": model},
            "fp8-rocm",
            ("transformer",),
            registry=rocm_host.registry,
            device_type="cpu",
        )


def test_rocm_fp8_unavailable_without_hip(rocm_host, no_hip) -> None:
    with pytest.raises(ConfigError, match="needs a ROCm"):
        quantize_components(
            {"transformer": tiny_denoiser()},
            "fp8-rocm",
            ("transformer",),
            registry=rocm_host.registry,
            device_type="cuda",
        )
