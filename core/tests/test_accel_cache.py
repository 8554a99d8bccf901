"""Step caches on tiny random Wan and Qwen-Image transformers: exactness at threshold 0, hits
counted per request, independent request contexts, and quality (PSNR/SSIM) helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from omni_core import DenoiserSpec, hookimpl
from omni_core.contract.config import CacheConfig
from omni_core.contract.errors import ConfigError
from omni_core.diffusion import DenoiserAdapter
from omni_core.diffusion.acceleration import apply_acceleration
from omni_core.diffusion.acceleration.cache import apply_cache
from omni_core.diffusion.acceleration.quality import psnr, ssim
from omni_core.diffusion.denoisers import resolve_denoiser

STEPS = 8


def _tiny_wan() -> torch.nn.Module:
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=16,
        ffn_dim=32,
        num_layers=4,
        rope_max_seq_len=32,
    ).eval()


def _tiny_qwen() -> torch.nn.Module:
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(0)
    return QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=3,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=16,
        axes_dims_rope=(2, 2, 4),
    ).eval()


def _wan_inputs(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(1, 4, 2, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(1, 6, 16, generator=g),
    }


def _loop_wan(model, name: str | None, handle=None, seed: int = 0) -> torch.Tensor:
    """A tiny Euler-style denoising loop; the cache context wraps each transformer call."""
    inputs = _wan_inputs(seed)
    x = inputs["hidden_states"]
    for i, t in enumerate(torch.linspace(999, 50, STEPS)):
        ctx = handle.context(name) if handle is not None else _null()
        with ctx, torch.no_grad():
            v = model(
                hidden_states=x,
                timestep=t.reshape(1),
                encoder_hidden_states=inputs["encoder_hidden_states"],
                return_dict=False,
            )[0]
        x = x - v * (1.0 / STEPS) * (1 + 0 * i)
    return x


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _loop_qwen(model, name: str | None, handle=None) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 16, 16, generator=g)  # 4x4 latent patches of 16 channels
    text = torch.randn(1, 5, 16, generator=g)
    mask = torch.ones(1, 5, dtype=torch.long)
    for t in torch.linspace(1.0, 0.05, STEPS):
        ctx = handle.context(name) if handle is not None else _null()
        with ctx, torch.no_grad():
            v = model(
                hidden_states=x,
                encoder_hidden_states=text,
                encoder_hidden_states_mask=mask,
                timestep=t.reshape(1),
                img_shapes=[(1, 4, 4)],
                return_dict=False,
            )[0]
        x = x - v * (1.0 / STEPS)
    return x


@pytest.fixture(scope="session")
def wan_reference() -> torch.Tensor:
    return _loop_wan(_tiny_wan(), None)


EXACT = {
    "first-block": {"threshold": 0.0},
    "teacache": {"threshold": 0.0},
    "taylorseer": {"cache_interval": 1, "warmup_steps": 0},
    "magcache": {"threshold": 0.0, "num_inference_steps": STEPS, "mag_ratios": "1.0,0.99,0.98"},
}

LOSSY = {
    "first-block": {"threshold": 10.0},
    "teacache": {"threshold": 10.0},
    "taylorseer": {"cache_interval": 2, "warmup_steps": 2},
    "magcache": {
        "threshold": 10.0,
        "num_inference_steps": STEPS,
        "mag_ratios": "1.0,0.99,0.98",
        "retention_ratio": 0.0,
    },
}


@pytest.mark.parametrize("backend", sorted(EXACT))
def test_threshold_zero_equals_uncached(backend, registry, wan_reference):
    model = _tiny_wan()
    handle = apply_cache(
        model, CacheConfig(backend=backend, options=EXACT[backend]), registry=registry
    )
    out = _loop_wan(model, "req-a:cond", handle)
    torch.testing.assert_close(out, wan_reference, rtol=1e-5, atol=1e-5)
    stats = handle.finish(["req-a:cond"])
    assert stats.calls == STEPS and stats.hits == 0


@pytest.mark.parametrize("backend", sorted(LOSSY))
def test_lossy_cache_hits_counted_per_request(backend, registry, wan_reference):
    model = _tiny_wan()
    handle = apply_cache(
        model, CacheConfig(backend=backend, options=LOSSY[backend]), registry=registry
    )
    out = _loop_wan(model, "r1:cond", handle)
    stats = handle.stats(["r1:cond"])
    assert stats.calls == STEPS
    assert 0 < stats.hits < STEPS
    assert not torch.equal(out, wan_reference)
    assert torch.isfinite(out).all()
    # the next request starts clean: same input, same result, same hits
    out2 = _loop_wan(model, "r2:cond", handle)
    torch.testing.assert_close(out2, out)
    assert handle.finish(["r1:cond"]).hits == stats.hits
    assert handle.finish(["r2:cond"]).hits == stats.hits
    assert handle.stats().calls == 0


def test_teacache_interleaved_requests_stay_independent(registry):
    model = _tiny_wan()
    handle = apply_cache(
        model, CacheConfig(backend="teacache", options={"threshold": 10.0}), registry=registry
    )
    alone_a = _loop_wan(model, "a", handle, seed=0)
    alone_b = _loop_wan(model, "b", handle, seed=1)
    handle.finish(["a", "b"])
    # now interleave the two requests step by step
    xs = {"a": _wan_inputs(0), "b": _wan_inputs(1)}
    lat = {k: v["hidden_states"] for k, v in xs.items()}
    for t in torch.linspace(999, 50, STEPS):
        for name in ("a", "b"):
            with handle.context(name), torch.no_grad():
                v = model(
                    hidden_states=lat[name],
                    timestep=t.reshape(1),
                    encoder_hidden_states=xs[name]["encoder_hidden_states"],
                    return_dict=False,
                )[0]
            lat[name] = lat[name] - v * (1.0 / STEPS)
    torch.testing.assert_close(lat["a"], alone_a)
    torch.testing.assert_close(lat["b"], alone_b)


@pytest.mark.parametrize("backend", ["teacache", "first-block"])
def test_qwen_image_tuple_blocks(backend, registry):
    model = _tiny_qwen()
    ref = _loop_qwen(model, None)
    exact = apply_cache(
        model, CacheConfig(backend=backend, options={"threshold": 0.0}), registry=registry
    )
    torch.testing.assert_close(_loop_qwen(model, "q", exact), ref, rtol=1e-5, atol=1e-5)
    assert exact.finish(["q"]).hits == 0
    exact.remove()
    lossy = apply_cache(
        model, CacheConfig(backend=backend, options={"threshold": 50.0}), registry=registry
    )
    out = _loop_qwen(model, "q2", lossy)
    assert lossy.finish(["q2"]).hits > 0
    assert torch.isfinite(out).all()


#: The adapter a test model plugin registers for the tiny Wan (see the test below).
CUSTOM = DenoiserAdapter(architecture="X", blocks=("blocks",), teacache_coefficients=(2.0, 0.0))


class _DenoiserPlugin:
    """A model plugin that registers one DenoiserSpec for diffusers' Wan transformer."""

    def __init__(self, implementation: str) -> None:
        self.implementation = implementation

    @hookimpl
    def omni_register_denoisers(self, register):
        register(
            DenoiserSpec(
                name="custom-wan",
                architectures=("WanTransformer3DModel",),
                implementation=self.implementation,
            )
        )


def test_adapters_and_coefficients(registry, registry_with):
    from omni_wan.denoiser import wan_adapter

    wan = _tiny_wan()
    adapter = resolve_denoiser(wan, registry)
    assert adapter.architecture == "WanTransformer3DModel"
    assert adapter.blocks == ("blocks",) and adapter.fuse_qkv
    assert "uncalibrated" in adapter.teacache_source  # tiny size: no published fit

    class Config:
        num_attention_heads, attention_head_dim, image_dim = 40, 128, None

    class Big:
        config = Config()

    assert "T2V-14B" in wan_adapter(Big()).teacache_source
    qwen = resolve_denoiser(_tiny_qwen(), registry)
    assert qwen.blocks == ("transformer_blocks",) and callable(qwen.teacache_indicator)

    # a model plugin registers its adapter: a DenoiserSpec naming an adapter object...
    custom = CUSTOM
    with_object = registry_with(_DenoiserPlugin(f"{__name__}:CUSTOM"))
    assert resolve_denoiser(wan, with_object) is custom

    # ... or a (module) -> adapter function, imported lazily
    lazy = registry_with(_DenoiserPlugin("omni_wan.denoiser:wan_adapter"))
    assert resolve_denoiser(wan, lazy).architecture == "WanTransformer3DModel"


def test_cache_config_errors(registry):
    model = _tiny_wan()
    with pytest.raises(ConfigError, match="unknown cache backend"):
        apply_cache(model, CacheConfig(backend="nope"), registry=registry)
    with pytest.raises(ConfigError, match="mag_ratios"):
        apply_cache(model, CacheConfig(backend="magcache"), registry=registry)
    with pytest.raises(ConfigError, match="unknown option"):
        apply_cache(
            model, CacheConfig(backend="teacache", options={"thresh": 1}), registry=registry
        )
    with pytest.raises(ConfigError, match="cache-dit not installed"):
        apply_cache(model, CacheConfig(backend="dbcache"), registry=registry)
    with pytest.raises(ConfigError, match="not supported by this pipeline"):
        apply_cache(
            model, CacheConfig(backend="teacache"), registry=registry, allowed=("first-block",)
        )


def test_apply_acceleration_cache_and_report(registry, wan_reference):
    from omni_core.contract.pipeline import PipelineOptions
    from omni_core.contract.platforms import current_platform

    model = _tiny_wan()
    options = PipelineOptions(
        device=torch.device("cpu"),
        dtype=torch.float32,
        platform=current_platform(),
        cache=CacheConfig(backend="teacache", options={"threshold": 10.0}),
    )
    report = apply_acceleration(
        {"transformer": model, "vae": torch.nn.Linear(2, 2)}, options, registry=registry
    )
    assert report.order == ["fuse_qkv", "cache:teacache"]
    assert report.fused_qkv["transformer"] == 8  # 4 blocks x (self qkv + cross kv)
    assert set(report.caches) == {"transformer"}
    x = _loop_wan(model, "rq:cond", report.caches["transformer"])
    hits = report.finish(["rq:cond"])
    assert hits["transformer"]["backend"] == "teacache"
    assert hits["transformer"]["calls"] == STEPS and hits["transformer"]["hits"] > 0
    info = report.as_dict()
    assert info["lossy"] and info["cache"]["transformer"]["backend"] == "teacache"
    # quality against the uncached run on the same seed
    assert math.isfinite(psnr(wan_reference, x, data_range=float(wan_reference.abs().max() * 2)))


def test_fused_qkv_is_exact(registry, wan_reference):
    from omni_core.diffusion.acceleration.compile import fuse_qkv

    model = _tiny_wan()
    assert fuse_qkv(model) == 8
    # unfused weights dropped (weight-free stand-ins take their place)
    assert not any(n.endswith("attn1.to_q.weight") for n, _ in model.named_parameters())
    torch.testing.assert_close(_loop_wan(model, None), wan_reference, rtol=1e-5, atol=1e-5)


def test_psnr_ssim():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    assert psnr(img, img) == math.inf
    assert ssim(img, img) == pytest.approx(1.0)
    noisy = np.clip(img.astype(int) + rng.normal(0, 8, img.shape), 0, 255).astype(np.uint8)
    mse = np.mean((img.astype(float) - noisy.astype(float)) ** 2)
    assert psnr(img, noisy) == pytest.approx(10 * math.log10(255**2 / mse))
    very = np.clip(img.astype(int) + rng.normal(0, 60, img.shape), 0, 255).astype(np.uint8)
    assert 0 < ssim(img, very) < ssim(img, noisy) < 1
    assert ssim(img, noisy) == pytest.approx(ssim(noisy, img))
    # videos and torch tensors, floats in [0, 1]
    vid = torch.rand(3, 16, 16, 3)
    assert ssim(vid, vid) == pytest.approx(1.0)
    # SSIM is invariant to nothing trivial: a constant shift lowers it only slightly
    assert ssim(vid, (vid + 0.01).clamp(0, 1)) > 0.95
    with pytest.raises(ValueError):
        psnr(img, img[:8])
