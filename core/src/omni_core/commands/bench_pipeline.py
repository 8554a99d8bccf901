"""``omni bench pipeline``: our acceleration against diffusers, side by side, in one run.

For each workload (real-size transformer configs with random bf16 weights, same seed for every
mode so that outputs are comparable) it measures:

- ``sec_per_step``: one denoising step with CFG (diffusers: two batch-1 forwards, as its pipelines
  do; omni: one batch-2 forward, CFG batched), mean over the timed steps after warm-up;
- ``tflops`` / ``pct_of_peak``: FLOPs of one step (``torch.utils.flop_counter.FlopCounterMode`` on
  one eager forward, x2 for CFG) over ``sec_per_step``, against the bf16 matmul peak *measured in
  the same run* (a large ``torch.mm``);
- ``peak_mem_gib``: ``torch.cuda.max_memory_allocated`` over the timed steps;
- ``e2e_s``: a 50-step request including text encoding (real-size random-weight encoder) and VAE
  decode (real-size random-weight VAE), measured separately and added to 50 x ``sec_per_step``
  (``e2e_method`` says so), or the measured loop when 50 steps were run;
- ``psnr_vs_bf16`` / ``ssim_vs_bf16``: final latents of a lossy mode against our bf16 mode after
  the same steps from the same noise (latents scaled to the reference's range).

Modes: ``bf16`` (diffusers eager; omni: fused QKV + regional compile + shape-aware SDPA + batched
CFG), ``bf16-compiled`` (diffusers' own ``compile_repeated_blocks``, the bar an expert user has),
``fp8`` (omni: fp8 row-wise linears, compiled), ``cache:<name>`` (omni bf16 + a step cache).
Rows go to ``--out`` (a JSON list), with a PNG plot beside it and the exact command in each row.
``--tiny`` runs tiny configs on CPU in well under a minute (a smoke test of the same code).
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform as _platform
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

# -- workloads -------------------------------------------------------------------------------------
WAN_COMMON: dict[str, Any] = {
    "patch_size": (1, 2, 2),
    "attention_head_dim": 128,
    "text_dim": 4096,
    "freq_dim": 256,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 1024,
}


@dataclass
class Workload:
    """A model size and request shape; ``latent`` is the transformer input without batch."""

    name: str
    kind: str  # "wan" | "qwen"
    transformer: dict[str, Any]
    latent: tuple[int, ...]
    text_tokens: int
    text_encoder: dict[str, Any]
    vae: dict[str, Any]
    vae_latent: tuple[int, ...]
    steps_timed: int = 3
    quality_steps: int = 10
    img_shapes: tuple[int, int, int] | None = None
    notes: str = ""
    #: Wan2.2 TI2V: one timestep per latent token (diffusers' ``expand_timesteps``).
    per_token_timestep: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def real_workloads() -> dict[str, Workload]:
    """Real-size configs (public model cards / config.json of the checkpoints)."""
    return {
        "wan2.2-ti2v-5b-704x1280x121": Workload(
            name="wan2.2-ti2v-5b-704x1280x121",
            kind="wan",
            transformer={
                **WAN_COMMON,
                "num_attention_heads": 24,
                "in_channels": 48,
                "out_channels": 48,
                "ffn_dim": 14336,
                "num_layers": 30,
            },
            latent=(48, 31, 44, 80),  # 121 frames / 4 + 1, 704 / 16, 1280 / 16
            text_tokens=512,
            text_encoder={"kind": "umt5-xxl"},
            vae={
                "kind": "wan",
                "base_dim": 160,
                "decoder_base_dim": 256,
                "z_dim": 48,
                "is_residual": True,
                "in_channels": 12,
                "out_channels": 12,
                "patch_size": 2,
                "scale_factor_spatial": 16,
                "scale_factor_temporal": 4,
                "latents_mean": [0.0] * 48,
                "latents_std": [1.0] * 48,
            },
            vae_latent=(48, 31, 44, 80),
            steps_timed=3,
            quality_steps=8,
            per_token_timestep=True,
        ),
        "wan2.1-t2v-14b-480x832x81": Workload(
            name="wan2.1-t2v-14b-480x832x81",
            kind="wan",
            transformer={
                **WAN_COMMON,
                "num_attention_heads": 40,
                "in_channels": 16,
                "out_channels": 16,
                "ffn_dim": 13824,
                "num_layers": 40,
            },
            latent=(16, 21, 60, 104),
            text_tokens=512,
            text_encoder={"kind": "umt5-xxl"},
            vae={"kind": "wan"},
            vae_latent=(16, 21, 60, 104),
            steps_timed=2,
            quality_steps=6,
        ),
        "qwen-image-1024": Workload(
            name="qwen-image-1024",
            kind="qwen",
            transformer={
                "patch_size": 2,
                "in_channels": 64,
                "out_channels": 16,
                "num_layers": 60,
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "joint_attention_dim": 3584,
                "axes_dims_rope": (16, 56, 56),
            },
            latent=(64 * 64, 64),  # packed 2x2 patches of the 128x128x16 latent
            img_shapes=(1, 64, 64),
            text_tokens=128,
            text_encoder={"kind": "qwen2.5-7b"},
            vae={"kind": "qwen"},
            vae_latent=(16, 1, 128, 128),
            steps_timed=8,
            quality_steps=50,
        ),
    }


def tiny_workloads() -> dict[str, Workload]:
    """Same code paths at toy sizes (CPU smoke test)."""
    wan = {
        **WAN_COMMON,
        "attention_head_dim": 16,
        "text_dim": 32,
        "freq_dim": 32,
        "rope_max_seq_len": 64,
        "num_attention_heads": 2,
        "in_channels": 4,
        "out_channels": 4,
        "ffn_dim": 64,
        "num_layers": 3,
    }
    return {
        "tiny-wan": Workload(
            name="tiny-wan",
            kind="wan",
            transformer=wan,
            latent=(4, 2, 8, 8),
            text_tokens=8,
            text_encoder={"kind": "umt5-tiny"},
            vae={"kind": "wan", "base_dim": 8, "z_dim": 4},
            vae_latent=(4, 2, 4, 4),
            steps_timed=1,
            quality_steps=6,
            per_token_timestep=True,
        ),
        "tiny-qwen": Workload(
            name="tiny-qwen",
            kind="qwen",
            transformer={
                "patch_size": 2,
                "in_channels": 16,
                "out_channels": 4,
                "num_layers": 3,
                "attention_head_dim": 8,
                "num_attention_heads": 2,
                "joint_attention_dim": 16,
                "axes_dims_rope": (2, 2, 4),
            },
            latent=(16, 16),
            img_shapes=(1, 4, 4),
            text_tokens=6,
            text_encoder={"kind": "qwen-tiny"},
            vae={"kind": "qwen", "base_dim": 8},
            vae_latent=(16, 1, 4, 4),
            steps_timed=1,
            quality_steps=6,
        ),
    }


# -- helpers ---------------------------------------------------------------------------------------
def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize()


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: Any) -> float | None:
    import torch

    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return None


def measure_matmul_peak(device: Any, dtype: Any, n: int, iters: int) -> float:
    """Achieved TFLOP/s of an n x n x n matmul in ``dtype`` (the run's own peak)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        torch.mm(a, b)
    _sync(device)
    dt = time.perf_counter() - t0
    del a, b
    return 2 * n**3 * iters / dt / 1e12


def measure_fp8_peak(device: Any, n: int, iters: int) -> float | None:
    import torch

    if device.type != "cuda" or not hasattr(torch, "float8_e4m3fn"):
        return None
    try:
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        for _ in range(3):
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(iters):
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        _sync(device)
        return 2 * n**3 * iters / (time.perf_counter() - t0) / 1e12
    except Exception:  # noqa: BLE001 - fp8 not supported on this device
        return None


def init_random_(module: Any, seed: int) -> None:
    """Deterministic random weights: norms 1, biases 0, the rest N(0, 1/fan_in).

    1/sqrt(fan_in) keeps every block's contribution to the residual stream visible at any width
    (about 0.02 at the real widths, as trained DiTs have), so lossy modes show their error.
    """
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1 and ("norm" in name or name.endswith(".weight")):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                # Draw on CPU in chunks is slow at 14B; draw on device from a seeded generator.
                dev_gen = torch.Generator(device=p.device).manual_seed(
                    int(torch.randint(0, 2**31 - 1, (1,), generator=g))
                )
                fan_in = max(p[0].numel(), 1) if p.ndim > 1 else p.numel()
                p.normal_(0.0, fan_in**-0.5, generator=dev_gen)


def build_transformer(w: Workload, device: Any, dtype: Any, seed: int = 0) -> Any:
    """The diffusers transformer class with the workload's config and seeded random weights."""
    import torch

    if w.kind == "wan":
        from diffusers import WanTransformer3DModel as cls
    else:
        from diffusers import QwenImageTransformer2DModel as cls
    # Built on the meta device and materialised directly in ``dtype`` on ``device`` (no fp32
    # copy of a 20B model); buffers (RoPE tables) come from a 1-block twin built normally.
    with torch.device("meta"):
        model = cls(**w.transformer)
    model = model.to(dtype=dtype).to_empty(device=device).eval().requires_grad_(False)
    twin = cls(**{**w.transformer, "num_layers": 1}).to(dtype=dtype)
    twin_buffers = dict(twin.named_buffers())
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name not in twin_buffers:
                raise RuntimeError(f"cannot initialise buffer {name} of {cls.__name__}")
            buf.copy_(twin_buffers[name].to(buf.dtype))
        # plain tensor attributes (e.g. Qwen's RoPE tables) are not buffers: copy them too
        twin_modules = dict(twin.named_modules())
        for name, module in model.named_modules():
            for attr, value in list(vars(module).items()):
                if isinstance(value, torch.Tensor) and value.is_meta:
                    source = getattr(twin_modules[name], attr)
                    setattr(module, attr, source.to(device))
    del twin
    init_random_(model, seed)
    return model


@dataclass
class Inputs:
    latents: Any
    cond: Any
    uncond: Any
    cond_mask: Any = None
    uncond_mask: Any = None


def make_inputs(w: Workload, device: Any, dtype: Any, seed: int = 0) -> Inputs:
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    latents = torch.randn(1, *w.latent, generator=g).to(device, dtype)
    dim = w.transformer.get("text_dim") or w.transformer.get("joint_attention_dim")
    cond = torch.randn(1, w.text_tokens, dim, generator=g).to(device, dtype)
    uncond = torch.randn(1, w.text_tokens, dim, generator=g).to(device, dtype)
    # Full-length prompts: no padding mask (diffusers' Qwen pipeline drops an all-ones mask too).
    return Inputs(latents, cond, uncond)


def forward(w: Workload, model: Any, x: Any, t: Any, text: Any, mask: Any = None) -> Any:
    """One transformer forward (batch = x.shape[0])."""
    b = x.shape[0]
    if w.kind == "wan":
        if w.per_token_timestep:
            tokens = math.prod(x.shape[2:]) // 4  # 1x2x2 patches
            timestep = t.reshape(1, 1).expand(b, tokens)
        else:
            timestep = t.expand(b)
        return model(
            hidden_states=x,
            timestep=timestep,
            encoder_hidden_states=text,
            return_dict=False,
        )[0]
    return model(
        hidden_states=x,
        encoder_hidden_states=text,
        encoder_hidden_states_mask=mask,
        timestep=t.expand(b) / 1000.0,
        img_shapes=[w.img_shapes] * b,
        return_dict=False,
    )[0]


GUIDANCE = 5.0


def sigmas(n: int, device: Any) -> Any:
    import torch

    return [*torch.linspace(1.0, 1.0 / n, n, device=device).tolist(), 0.0]


def run_loop(
    w: Workload,
    step: Callable[[Any, Any, int], Any],
    inputs: Inputs,
    n_steps: int,
    device: Any,
    *,
    warmup: int = 1,
) -> tuple[Any, float]:
    """Euler flow-matching loop; returns (x_final - x_0, mean seconds per timed step).

    Latents stay float32 between steps (as diffusers' pipelines keep them) and are cast to the
    model dtype per forward. The returned *displacement* is what the denoiser produced over the
    run: with random weights the final latents are dominated by the shared initial noise, so
    quality is measured on the displacement instead.
    """
    import torch

    sig = sigmas(n_steps, device)
    # timesteps on the device before the loop: no host-to-device copy (and sync) per step
    ts = torch.tensor(sig[:-1], device=device) * 1000.0
    x0 = inputs.latents.float()
    dtype = inputs.latents.dtype
    with torch.no_grad():
        for _ in range(warmup):  # warm-up forwards on the first timestep; state unchanged
            step(inputs.latents, ts[0:1], -1)
        _sync(device)
        x = x0
        t0 = time.perf_counter()
        for i in range(n_steps):
            t = ts[i : i + 1]
            v = step(x.to(dtype), t, i)
            x = x + (sig[i + 1] - sig[i]) * v.float()
        _sync(device)
        dt = (time.perf_counter() - t0) / n_steps
    return x - x0, dt


def diffusers_step(w: Workload, model: Any, inputs: Inputs) -> Callable[[Any, Any, int], Any]:
    """diffusers' pipelines: two batch-1 forwards per step (cond, uncond) with cache contexts."""

    def step(x: Any, t: Any, i: int) -> Any:
        with _maybe_ctx(model, "cond"):
            c = forward(w, model, x, t, inputs.cond, inputs.cond_mask)
        with _maybe_ctx(model, "uncond"):
            u = forward(w, model, x, t, inputs.uncond, inputs.uncond_mask)
        return u + GUIDANCE * (c - u)

    return step


class _maybe_ctx:
    def __init__(self, model: Any, name: str) -> None:
        self.cm = model.cache_context(name) if hasattr(model, "cache_context") else None

    def __enter__(self) -> None:
        if self.cm is not None:
            self.cm.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        if self.cm is not None:
            self.cm.__exit__(*exc)
        return False


def omni_step(
    w: Workload, model: Any, inputs: Inputs, accel: Any, request: str
) -> Callable[[Any, Any, int], Any]:
    """Our pipelines' step: CFG batched into one batch-2 forward, inside the cache context.

    With a step cache, the batched cond+uncond pair is one cache context (the skip decision is
    taken for the pair), so cached runs reuse the same compiled batch-2 graph.
    """
    import torch

    text = torch.cat([inputs.cond, inputs.uncond])
    mask = None if inputs.cond_mask is None else torch.cat([inputs.cond_mask, inputs.uncond_mask])

    def step(x: Any, t: Any, i: int) -> Any:
        with accel.cache_context("transformer", request):
            out = forward(w, model, torch.cat([x, x]), t, text, mask)
        c, u = out.chunk(2)
        return u + GUIDANCE * (c - u)

    return step


def count_step_flops(w: Workload, model: Any, inputs: Inputs, device: Any) -> float:
    """FLOPs of one CFG step: one eager batch-1 forward counted, times two."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    t = torch.tensor([500.0], device=device)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        forward(w, model, inputs.latents, t, inputs.cond, inputs.cond_mask)
    return 2.0 * counter.get_total_flops()


def choose_attention_backends(model: Any, w: Workload) -> dict[str, int]:
    """Apply the ``sdpa-auto`` choice per attention module through diffusers' backend switch.

    Compile-friendly: the kernel is fixed per module before compiling (no per-call state).
    """
    import torch

    from omni_core.builtins.attention_extra import choose_sdpa_kernel

    if w.kind == "wan":
        tokens = math.prod(w.latent[1:]) // 4  # 1x2x2 patches
        shapes = {"self": tokens, "cross": tokens}
    else:
        tokens = w.latent[0] + w.text_tokens
        shapes = {"self": tokens, "cross": tokens}
    head_dim = w.transformer["attention_head_dim"]
    device_type = next(model.parameters()).device.type
    chosen: dict[str, int] = {}
    for module in model.modules():
        processor = getattr(module, "processor", None)
        if processor is None or not hasattr(processor, "_attention_backend"):
            continue
        role = "cross" if getattr(module, "is_cross_attention", False) else "self"
        q = (1, shapes[role], 1, head_dim)
        kernel = choose_sdpa_kernel(q, q, torch.bfloat16, device_type, masked=False)
        backend = {"cudnn": "_native_cudnn", "flash": "_native_flash"}.get(kernel, "native")
        from diffusers.models.attention_dispatch import AttentionBackendName

        processor._attention_backend = AttentionBackendName(backend)
        chosen[backend] = chosen.get(backend, 0) + 1
    return chosen


def _options(device: Any, dtype: Any, *, quant: str | None, cache: str | None, extra: dict) -> Any:
    from omni_core.config import CacheConfig, QuantizationConfig
    from omni_core.pipelines.base import PipelineOptions
    from omni_core.platforms import current_platform

    cache_cfg = CacheConfig()
    if cache:
        cache_cfg = CacheConfig(backend=cache, options=CACHE_OPTIONS.get(cache, {}))
    return PipelineOptions(
        device=device,
        dtype=dtype,
        platform=current_platform(),
        quantization=QuantizationConfig(method=quant),
        cache=cache_cfg,
        extra=extra,
    )


#: Cache settings used by the bench (moderate, quality reported next to the speed).
CACHE_OPTIONS: dict[str, dict[str, Any]] = {
    "teacache": {"threshold": 0.2},
    "first-block": {"threshold": 0.08},
    "taylorseer": {"cache_interval": 4, "warmup_steps": 3},
}


def measure_text_encoder(w: Workload, device: Any, dtype: Any) -> tuple[float | None, str]:
    """Seconds to encode prompt + negative prompt with a real-size random-weight encoder."""
    import torch

    kind = w.text_encoder["kind"]
    try:
        if kind.startswith("umt5"):
            from transformers import UMT5Config, UMT5EncoderModel

            cfg = (
                UMT5Config(
                    vocab_size=256384,
                    d_model=4096,
                    d_kv=64,
                    d_ff=10240,
                    num_layers=24,
                    num_heads=64,
                    feed_forward_proj="gated-gelu",
                )
                if kind == "umt5-xxl"
                else UMT5Config(
                    vocab_size=64,
                    d_model=32,
                    d_kv=8,
                    d_ff=64,
                    num_layers=2,
                    num_heads=4,
                    feed_forward_proj="gated-gelu",
                )
            )
            with torch.device(device):
                enc = UMT5EncoderModel(cfg)
            vocab = cfg.vocab_size
        else:
            from transformers import Qwen2Config, Qwen2Model

            cfg = (
                Qwen2Config(
                    vocab_size=152064,
                    hidden_size=3584,
                    intermediate_size=18944,
                    num_hidden_layers=28,
                    num_attention_heads=28,
                    num_key_value_heads=4,
                )
                if kind == "qwen2.5-7b"
                else Qwen2Config(
                    vocab_size=64,
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                )
            )
            with torch.device(device):
                enc = Qwen2Model(cfg)
            vocab = cfg.vocab_size
    except Exception as exc:  # noqa: BLE001 - transformers version without the class
        return None, f"text encoder not measured ({type(exc).__name__}: {exc})"
    enc = enc.to(dtype).eval()
    ids = torch.randint(0, vocab, (2, w.text_tokens), device=device)  # prompt + negative
    with torch.no_grad():
        enc(input_ids=ids)
        _sync(device)
        t0 = time.perf_counter()
        enc(input_ids=ids)
        _sync(device)
        dt = time.perf_counter() - t0
    del enc
    _free()
    return dt, f"{kind} random weights"


def measure_vae_decode(w: Workload, device: Any, dtype: Any) -> tuple[float | None, str]:
    """Seconds to decode one request's final latents with a real-size random-weight VAE."""
    import torch

    cfg = dict(w.vae)
    kind = cfg.pop("kind")
    try:
        if kind == "wan":
            from diffusers import AutoencoderKLWan as cls
        else:
            from diffusers import AutoencoderKLQwenImage as cls
        if "z_dim" in cfg and "latents_mean" not in cfg and cfg["z_dim"] != 16:
            cfg["latents_mean"] = [0.0] * cfg["z_dim"]
            cfg["latents_std"] = [1.0] * cfg["z_dim"]
        with torch.device(device):
            vae = cls(**cfg)
        vae = vae.to(dtype).eval()
        z = torch.randn(1, *w.vae_latent, device=device, dtype=dtype)
        with torch.no_grad():
            _sync(device)
            t0 = time.perf_counter()
            vae.decode(z, return_dict=False)
            _sync(device)
            dt = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: say so in the row
        return None, f"VAE decode not measured ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        _free()
    return dt, f"{kind} VAE random weights, one decode (first call)"


def quality(reference: Any, test: Any) -> tuple[float, float]:
    """PSNR/SSIM of the runs' latent displacements, scaled by the reference's range."""
    from omni_core.acceleration.quality import psnr, ssim

    ref = reference.float().cpu()
    out = test.float().cpu()
    lo, hi = float(ref.min()), float(ref.max())
    scale = max(hi - lo, 1e-6)
    ref_n = ((ref - lo) / scale).clamp(0, 1)
    out_n = ((out - lo) / scale).clamp(0, 1)
    p = psnr(ref_n, out_n, data_range=1.0)
    # SSIM on 2-D planes: [C, (F,) H, W] -> [..., H, W, 1]
    if ref_n.ndim >= 4:  # wan: [1, C, F, H, W]
        planes_r = ref_n.reshape(-1, *ref_n.shape[-2:])[..., None]
        planes_o = out_n.reshape(-1, *out_n.shape[-2:])[..., None]
    else:  # qwen packed: [1, tokens, channels] -> treat as one plane
        planes_r, planes_o = ref_n[0][..., None], out_n[0][..., None]
    s = ssim(planes_r.numpy(), planes_o.numpy(), data_range=1.0)
    return (round(p, 2) if math.isfinite(p) else p), round(s, 4)


# -- the run ---------------------------------------------------------------------------------------
@dataclass
class BenchSettings:
    device: Any
    dtype: Any
    modes: tuple[str, ...]
    caches: tuple[str, ...]
    quant: str
    compile_backend: str
    compile_mode: str | None
    peak_bf16: float
    peak_fp8: float | None
    command: str
    measure_e2e: bool = True
    log: Callable[[str], None] = print
    #: Called with a workload's rows after every new row (partial results survive a timeout).
    flush: Callable[[list[dict[str, Any]]], None] = lambda _rows: None


class _Rows(list):
    """A row list that flushes after every append."""

    def __init__(self, flush: Callable[[list[dict[str, Any]]], None]) -> None:
        super().__init__()
        self._flush = flush

    def append(self, item: dict[str, Any]) -> None:
        super().append(item)
        self._flush(list(self))


def run_workload(w: Workload, s: BenchSettings) -> list[dict[str, Any]]:
    """All modes of one workload; a failing mode becomes a row with ``error``, never a crash."""
    import traceback

    from omni_core.acceleration import apply_acceleration
    from omni_core.acceleration.cache import apply_cache
    from omni_core.config import CacheConfig

    dev, dtype = s.device, s.dtype
    rows: list[dict[str, Any]] = _Rows(s.flush)
    inputs = make_inputs(w, dev, dtype)
    encode_s, encode_note = (None, "skipped")
    decode_s, decode_note = (None, "skipped")
    if s.measure_e2e:
        encode_s, encode_note = measure_text_encoder(w, dev, dtype)
        decode_s, decode_note = measure_vae_decode(w, dev, dtype)
        s.log(f"[{w.name}] text encode {encode_s} s ({encode_note}); decode {decode_s} s")
    flops = 0.0

    def row(backend: str, mode: str, sec: float, peak: float | None, **kw: Any) -> dict[str, Any]:
        tflops = flops / sec / 1e12 if sec and flops else None
        e2e = None
        if sec and encode_s is not None and decode_s is not None:
            e2e = round(encode_s + 50 * sec + decode_s, 2)
        out = {
            "workload": w.name,
            "backend": backend,
            "mode": mode,
            "sec_per_step": round(sec, 4) if sec else None,
            "sec_per_forward_equiv": round(sec / 2, 4) if sec else None,
            "tflops": _sig(tflops),
            "pct_of_peak": _sig(100 * tflops / s.peak_bf16) if tflops else None,
            "peak_mem_gib": peak,
            "e2e_s": e2e,
            "e2e_method": "extrapolated: text encode + 50 x sec_per_step + VAE decode, each "
            "measured in this run"
            if e2e is not None
            else "not measured",
            "psnr_vs_bf16": None,
            "ssim_vs_bf16": None,
            "device": _device_name(dev),
            "peak_bf16_tflops_measured": _sig(s.peak_bf16),
            "command": s.command,
        }
        out.update(kw)
        return out

    def guarded(backend: str, mode: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - report the failure in the results, go on
            s.log(f"[{w.name}] {backend} {mode} FAILED: {type(exc).__name__}: {exc}")
            s.log(traceback.format_exc(limit=6))
            rows.append(row(backend, mode, 0.0, None, error=f"{type(exc).__name__}: {exc}"[:500]))
        finally:
            _free()

    state: dict[str, Any] = {"reference": None}

    # 1. diffusers: eager (and the FLOP count), then its own regional compile
    def diffusers_modes() -> None:
        nonlocal flops
        model = build_transformer(w, dev, dtype)
        flops = count_step_flops(w, model, inputs, dev)
        s.log(f"[{w.name}] {flops / 1e12:.1f} TFLOP per CFG step")
        if "bf16" in s.modes:
            _reset_peak(dev)
            _, sec = run_loop(w, diffusers_step(w, model, inputs), inputs, w.steps_timed, dev)
            rows.append(
                row(
                    "diffusers",
                    "bf16",
                    sec,
                    _peak_gib(dev),
                    steps=w.steps_timed,
                    attention="diffusers default (native SDPA)",
                )
            )
            s.log(f"[{w.name}] diffusers bf16 {sec:.4f} s/step")
        if "bf16-compiled" in s.modes:

            def compiled() -> None:
                t0 = time.perf_counter()
                model.compile_repeated_blocks(fullgraph=True, backend=s.compile_backend)
                run_loop(w, diffusers_step(w, model, inputs), inputs, 1, dev, warmup=1)
                compile_s = time.perf_counter() - t0
                _reset_peak(dev)
                _, sec = run_loop(w, diffusers_step(w, model, inputs), inputs, w.steps_timed, dev)
                rows.append(
                    row(
                        "diffusers",
                        "bf16-compiled",
                        sec,
                        _peak_gib(dev),
                        steps=w.steps_timed,
                        compile_s=round(compile_s, 1),
                        attention="diffusers default (native SDPA)",
                    )
                )
                s.log(f"[{w.name}] diffusers compile_repeated_blocks {sec:.4f} s/step")

            guarded("diffusers", "bf16-compiled", compiled)

    guarded("diffusers", "bf16", diffusers_modes)

    extra = {"compile": True, "compile_backend": s.compile_backend, "compile_mode": s.compile_mode}

    # 2. ours, bf16: fused QKV + shape-aware attention + regional compile + batched CFG;
    # 3. the step caches on the same compiled model, quality against this bf16 run.
    def omni_bf16_and_caches() -> None:
        model = build_transformer(w, dev, dtype)
        attn = choose_attention_backends(model, w)
        accel = apply_acceleration(
            {"transformer": model}, _options(dev, dtype, quant=None, cache=None, extra=extra)
        )
        t0 = time.perf_counter()
        step = omni_step(w, model, inputs, accel, "warm")
        run_loop(w, step, inputs, 1, dev, warmup=1)
        compile_s = time.perf_counter() - t0
        _reset_peak(dev)
        _, sec = run_loop(w, step, inputs, w.steps_timed, dev, warmup=0)
        peak = _peak_gib(dev)
        state["reference"], _ = run_loop(w, step, inputs, w.quality_steps, dev, warmup=0)
        rows.append(
            row(
                "omni",
                "bf16",
                sec,
                peak,
                steps=w.steps_timed,
                compile_s=round(compile_s, 1),
                attention=attn,
                accel=accel.as_dict(),
            )
        )
        s.log(f"[{w.name}] omni bf16 {sec:.4f} s/step (compile+first step {compile_s:.1f} s)")
        for name in s.caches:

            def cached(name: str = name) -> None:
                handle = apply_cache(
                    model, CacheConfig(backend=name, options=CACHE_OPTIONS.get(name, {}))
                )
                accel.caches["transformer"] = handle
                try:
                    run_loop(
                        w, omni_step(w, model, inputs, accel, "warm"), inputs, 1, dev, warmup=0
                    )
                    accel.finish(["warm"])
                    step = omni_step(w, model, inputs, accel, f"q-{name}")
                    _reset_peak(dev)
                    out, sec = run_loop(w, step, inputs, w.quality_steps, dev, warmup=0)
                    stats = accel.finish([f"q-{name}"])["transformer"]
                    p, ss = quality(state["reference"], out)
                    rows.append(
                        row(
                            "omni",
                            f"cache:{name}",
                            sec,
                            _peak_gib(dev),
                            steps=w.quality_steps,
                            cache_hits=stats,
                            psnr_vs_bf16=p,
                            ssim_vs_bf16=ss,
                            cache_options=CACHE_OPTIONS.get(name, {}),
                            note="sec_per_step: mean over a full quality_steps loop (computed and "
                            "cached steps); random weights make hit rates unrepresentative",
                        )
                    )
                    s.log(f"[{w.name}] omni cache:{name} {sec:.4f} s/step hits {stats}")
                finally:
                    handle.remove()
                    accel.caches.clear()

            guarded("omni", f"cache:{name}", cached)

    if any(m == "bf16" or m.startswith("cache:") or m == "fp8" for m in s.modes):
        guarded("omni", "bf16", omni_bf16_and_caches)

    # 4. ours, fp8 (compiled): the same weights (same seed), quantized
    def omni_fp8() -> None:
        model = build_transformer(w, dev, dtype)
        attn = choose_attention_backends(model, w)
        accel = apply_acceleration(
            {"transformer": model}, _options(dev, dtype, quant=s.quant, cache=None, extra=extra)
        )
        t0 = time.perf_counter()
        step = omni_step(w, model, inputs, accel, "fp8")
        run_loop(w, step, inputs, 1, dev, warmup=1)
        compile_s = time.perf_counter() - t0
        _reset_peak(dev)
        _, sec = run_loop(w, step, inputs, w.steps_timed, dev, warmup=0)
        peak = _peak_gib(dev)
        out, _ = run_loop(w, step, inputs, w.quality_steps, dev, warmup=0)
        ref = state["reference"]
        p, ss = quality(ref, out) if ref is not None else (None, None)
        fp8_pct = round(100 * flops / sec / 1e12 / s.peak_fp8, 1) if s.peak_fp8 else None
        rows.append(
            row(
                "omni",
                "fp8",
                sec,
                peak,
                steps=w.steps_timed,
                quantizer=s.quant,
                compile_s=round(compile_s, 1),
                psnr_vs_bf16=p,
                ssim_vs_bf16=ss,
                attention=attn,
                accel=accel.as_dict(),
                pct_of_fp8_peak=fp8_pct,
            )
        )
        s.log(f"[{w.name}] omni fp8 {sec:.4f} s/step psnr {p}")

    if "fp8" in s.modes:
        guarded("omni", "fp8", omni_fp8)

    # speed-up against diffusers eager, and the e2e ingredients on every row
    base = next((r for r in rows if r["backend"] == "diffusers" and r["mode"] == "bf16"), None)
    for r in rows:
        if base and base.get("sec_per_step") and r.get("sec_per_step"):
            r["speedup_vs_diffusers"] = round(base["sec_per_step"] / r["sec_per_step"], 3)
        r["text_encode_s"] = round(encode_s, 3) if encode_s is not None else None
        r["vae_decode_s"] = round(decode_s, 3) if decode_s is not None else None
        r["e2e_notes"] = f"{encode_note}; {decode_note}"
        if flops and not r.get("tflops") and r.get("sec_per_step"):
            r["tflops"] = _sig(flops / r["sec_per_step"] / 1e12)
            r["pct_of_peak"] = _sig(100 * r["tflops"] / s.peak_bf16)
    s.flush(list(rows))
    return list(rows)


def _sig(value: float | None, digits: int = 4) -> float | None:
    """Round to ``digits`` significant digits (tiny CPU numbers stay non-zero)."""
    if not value:
        return None
    return float(f"{value:.{digits}g}")


def _device_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({_platform.processor() or _platform.machine()})"


def write_plot(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """A bar chart of seconds per step per workload and mode (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _plot_with_pillow(rows, path)
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), squeeze=False)
    for ax, wl in zip(axes[0], workloads, strict=True):
        sub = [r for r in rows if r["workload"] == wl and r.get("sec_per_step")]
        labels = [f"{r['backend']}\n{r['mode']}" for r in sub]
        values = [r["sec_per_step"] for r in sub]
        colors = ["#888888" if r["backend"] == "diffusers" else "#2a7ab9" for r in sub]
        ax.bar(range(len(sub)), values, color=colors)
        ax.set_xticks(range(len(sub)), labels, fontsize=7)
        ax.set_title(wl, fontsize=9)
        ax.set_ylabel("s / denoising step (CFG)")
        for i, r in enumerate(sub):
            pct = r.get("pct_of_peak")
            ax.text(i, values[i], f"{pct}%" if pct else "", ha="center", va="bottom", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_with_pillow(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """The same bar chart drawn with Pillow (a diffusers dependency) without matplotlib."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        return None
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    panel_w, panel_h, top, bottom = 420, 320, 30, 70
    image = Image.new("RGB", (panel_w * max(len(workloads), 1), panel_h), "white")
    draw = ImageDraw.Draw(image)
    for k, wl in enumerate(workloads):
        sub = [r for r in rows if r["workload"] == wl and r.get("sec_per_step")]
        x0 = k * panel_w
        draw.text((x0 + 10, 8), f"{wl}: s / step (CFG)", fill="black")
        if not sub:
            continue
        top_value = max(r["sec_per_step"] for r in sub)
        bar_w = (panel_w - 40) // len(sub)
        for i, r in enumerate(sub):
            h = int((panel_h - top - bottom) * r["sec_per_step"] / top_value)
            left = x0 + 20 + i * bar_w
            color = (136, 136, 136) if r["backend"] == "diffusers" else (42, 122, 185)
            draw.rectangle(
                [left + 4, panel_h - bottom - h, left + bar_w - 4, panel_h - bottom], fill=color
            )
            label = f"{r['sec_per_step']:.3g}s"
            if r.get("pct_of_peak"):
                label += f" {r['pct_of_peak']:.3g}%"
            draw.text((left + 4, panel_h - bottom - h - 12), label, fill="black")
            draw.text((left + 4, panel_h - bottom + 4), r["backend"][:9], fill="black")
            draw.text((left + 4, panel_h - bottom + 18), r["mode"][:14], fill="black")
    image.save(path)
    return path


def run(
    *,
    out: Path,
    workloads: tuple[str, ...],
    modes: tuple[str, ...],
    caches: tuple[str, ...],
    quant: str,
    tiny: bool,
    device: str | None,
    compile_backend: str | None,
    compile_mode: str | None,
    e2e: bool,
    command: str,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run the benchmark and write ``out`` (JSON rows), ``out``.png and ``out``.meta.json."""
    import torch

    table = tiny_workloads() if tiny else real_workloads()
    chosen = workloads or tuple(table)
    unknown = [n for n in chosen if n not in table]
    if unknown:
        raise click.BadParameter(
            f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(table)}",
            param_hint="--workload",
        )
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() and not tiny else "cpu"))
    dtype = torch.bfloat16
    n, iters = (8192, 50) if dev.type == "cuda" else (256, 5)
    peak_bf16 = measure_matmul_peak(dev, dtype, n, iters)
    peak_fp8 = measure_fp8_peak(dev, n, iters)
    log(f"bf16 matmul peak {peak_bf16:.1f} TFLOP/s; fp8 {peak_fp8} TFLOP/s on {_device_name(dev)}")
    settings = BenchSettings(
        device=dev,
        dtype=dtype,
        modes=modes,
        caches=tuple(m.split(":", 1)[1] for m in modes if m.startswith("cache:")) or caches,
        quant=quant,
        compile_backend=compile_backend or ("aot_eager" if dev.type == "cpu" else "inductor"),
        compile_mode=compile_mode,
        peak_bf16=peak_bf16,
        peak_fp8=peak_fp8,
        command=command,
        measure_e2e=e2e,
        log=log,
    )
    if settings.caches and not any(m.startswith("cache:") for m in modes):
        settings.modes = (*modes, *(f"cache:{c}" for c in settings.caches))
    rows: list[dict[str, Any]] = []
    out.parent.mkdir(parents=True, exist_ok=True)

    def flush(current: list[dict[str, Any]]) -> None:
        out.write_text(json.dumps(rows + current, indent=2, default=str))

    settings.flush = flush
    meta = {
        "command": command,
        "device": _device_name(dev),
        "peak_bf16_tflops": round(peak_bf16, 1),
        "peak_fp8_tflops": round(peak_fp8, 1) if peak_fp8 else None,
        "versions": _versions(),
        "tiny": tiny,
    }
    out.with_suffix(".meta.json").write_text(json.dumps(meta, indent=2))
    for name in chosen:
        rows.extend(run_workload(table[name], settings))
        out.write_text(json.dumps(rows, indent=2, default=str))
    plot = write_plot(rows, out.with_suffix(".png"))
    log(f"wrote {out} ({len(rows)} rows){' and ' + str(plot) if plot else ''}")
    return rows


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in ("torch", "diffusers", "transformers", "torchao", "cache-dit", "omni-core"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


DEFAULT_MODES = ("bf16", "bf16-compiled", "fp8", "cache:teacache", "cache:first-block")


@click.command("pipeline")
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=Path("pipeline-bench.json"),
    show_default=True,
    help="JSON rows; a PNG plot and a .meta.json are written beside it. (The repository's "
    "committed results live in bench/results/.)",
)
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    help="Workload(s) to run (default: all). Real: wan2.2-ti2v-5b-704x1280x121, "
    "wan2.1-t2v-14b-480x832x81, qwen-image-1024; tiny: tiny-wan, tiny-qwen.",
)
@click.option(
    "--mode", "modes", multiple=True, help=f"Modes (default: {', '.join(DEFAULT_MODES)})."
)
@click.option(
    "--quantizer",
    "quant",
    default="fp8",
    show_default=True,
    help="Quantizer used for the fp8 mode (fp8 or torchao-fp8).",
)
@click.option("--tiny", is_flag=True, help="Tiny configs on CPU: a smoke test (< 1 min).")
@click.option("--device", default=None, help="torch device (default: cuda if available).")
@click.option("--compile-backend", default=None, help="torch.compile backend (default inductor).")
@click.option(
    "--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs."
)
@click.option("--no-e2e", is_flag=True, help="Skip the text-encoder and VAE measurements.")
def pipeline(
    out: Path,
    workloads: tuple[str, ...],
    modes: tuple[str, ...],
    quant: str,
    tiny: bool,
    device: str | None,
    compile_backend: str | None,
    compile_mode: str | None,
    no_e2e: bool,
) -> None:
    """Benchmark our accelerated pipelines against diffusers on real-size random-weight models."""
    modes = modes or DEFAULT_MODES
    bad = [
        m for m in modes if m not in ("bf16", "bf16-compiled", "fp8") and not m.startswith("cache:")
    ]
    if bad:
        raise click.BadParameter(f"unknown mode(s): {', '.join(bad)}", param_hint="--mode")
    command = "omni bench pipeline " + shlex.join(sys.argv[3:] if len(sys.argv) > 3 else [])
    if os.environ.get("OMNI_BENCH_COMMAND"):
        command = os.environ["OMNI_BENCH_COMMAND"]
    run(
        out=out,
        workloads=workloads,
        modes=modes,
        caches=(),
        quant=quant,
        tiny=tiny,
        device=device,
        compile_backend=compile_backend,
        compile_mode=compile_mode,
        e2e=not no_e2e,
        command=command,
        log=lambda m: click.echo(m, err=True),
    )
