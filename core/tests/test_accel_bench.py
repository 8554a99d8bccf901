"""``omni bench pipeline --tiny``: the benchmark code on toy sizes (CPU), rows as documented."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner

from omni_core.commands.bench_pipeline import (
    build_transformer,
    pipeline,
    quality,
    run,
    tiny_workloads,
)

REQUIRED = {
    "workload",
    "backend",
    "mode",
    "sec_per_step",
    "tflops",
    "pct_of_peak",
    "peak_mem_gib",
    "e2e_s",
    "psnr_vs_bf16",
    "command",
}


def test_tiny_bench_rows(tmp_path):
    out = tmp_path / "rows.json"
    rows = run(
        out=out,
        workloads=("tiny-wan",),
        modes=("bf16", "fp8", "cache:first-block"),
        caches=(),
        quant="fp8",
        tiny=True,
        device="cpu",
        compile_backend="aot_eager",
        compile_mode=None,
        e2e=False,
        command="pytest",
        log=lambda _m: None,
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(rows, default=str))
    assert out.with_suffix(".png").exists() and out.with_suffix(".meta.json").exists()
    got = {(r["backend"], r["mode"]) for r in rows}
    assert got == {
        ("diffusers", "bf16"),
        ("omni", "bf16"),
        ("omni", "fp8"),
        ("omni", "cache:first-block"),
    }
    for r in rows:
        assert REQUIRED <= set(r), r
        assert "error" not in r, r
        assert r["sec_per_step"] > 0 and r["tflops"] > 0 and r["pct_of_peak"] > 0
    fp8 = next(r for r in rows if r["mode"] == "fp8")
    assert 20 < fp8["psnr_vs_bf16"] < 100  # lossy but close
    cache = next(r for r in rows if r["mode"] == "cache:first-block")
    assert cache["cache_hits"]["calls"] == tiny_workloads()["tiny-wan"].quality_steps


def test_meta_built_transformer_matches_eager_construction():
    w = tiny_workloads()["tiny-qwen"]
    a = build_transformer(w, torch.device("cpu"), torch.float32, seed=1)
    b = build_transformer(w, torch.device("cpu"), torch.float32, seed=1)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    # RoPE tables (plain tensor attributes) are real numbers, not meta
    assert not any(t.is_meta for t in vars(a.pos_embed).values() if isinstance(t, torch.Tensor))


def test_quality_of_identical_and_perturbed():
    ref = torch.randn(1, 4, 2, 8, 8)
    p, s = quality(ref, ref)
    assert p == float("inf") and s == 1.0
    p2, s2 = quality(ref, ref + 0.05 * torch.randn_like(ref))
    assert 20 < p2 < 60 and s2 < 1.0


def test_cli_rejects_bad_mode():
    result = CliRunner().invoke(pipeline, ["--tiny", "--mode", "turbo"])
    assert result.exit_code == 2
    assert "unknown mode" in result.output
