"""The static-shape step pieces (omni_core.runtime.graphs) on CPU: buckets, the fixed-size
slot-cache view (writes by index at each slot's own length, device-built mask and positions,
equal to the runtime's bound SlotCache on the real rows), the preallocated short cache (what a
DynamicCache returns), and the GraphRunner's eager path, reports and checks."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from omni_core.runtime import (
    GraphRunner,
    SlotCache,
    StaticKVCache,
    StaticSlotView,
    batch_buckets,
    bucket_for,
    key_bucket,
)


def test_buckets() -> None:
    assert [bucket_for(n) for n in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64, 64]
    assert bucket_for(65) == 128 and bucket_for(300) == 512
    assert key_bucket(1) == 256 and key_bucket(257) == 512 and key_bucket(5000) == 8192
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 32, 64]
    assert batch_buckets(5) == [1, 2, 4, 5]
    assert batch_buckets(1) == [1]
    with pytest.raises(ValueError):
        bucket_for(0)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_static_slot_view_equals_the_bound_slot_cache_on_real_rows() -> None:
    heads, dim, layers = 2, 8, 2
    gen = torch.Generator().manual_seed(0)
    caches = [SlotCache(6, 64, "cpu") for _ in range(2)]
    for cache in caches:
        cache.reserve(layers, heads, dim, torch.float32, slots=6, length=32)
    lengths = {0: 5, 1: 9, 3: 2}  # slots 0, 1, 3 in use (slot 2 free), different lengths
    for slot, length in lengths.items():
        prompt = torch.randn(1, heads, length, dim, generator=gen)
        for cache in caches:
            cache.reset_slot(slot)
            cache.bind([slot], length)
            for layer in range(layers):
                cache.update(prompt, prompt * 2, layer)
            cache.advance()
    eager, static = caches
    slots = sorted(lengths)
    rows = bucket_for(max(slots) + 1)  # 4: slot 2 is a padded row
    with pytest.raises(ValueError, match="reserve"):
        StaticSlotView(static, rows, key_bucket(9)).update(torch.zeros(4, 2, 1, 8), None, 0)
    view = StaticSlotView(static, rows, 16)  # padded past the longest row (9 + 3 steps)
    assert view.position_ids()[:, 0].tolist() == [5, 9, 0, 2]
    for _ in range(3):  # three decode steps: each row advances at its own length
        new_k = torch.randn(len(slots), heads, 1, dim, generator=gen)
        new_q = torch.randn(len(slots), heads, 1, dim, generator=gen)
        eager.bind(slots, 1)
        want = _attend(new_q, *eager.update(new_k, new_k + 1, 0), eager.attention_mask(new_q.dtype))
        padded_k = torch.zeros(rows, heads, 1, dim)
        padded_q = torch.zeros(rows, heads, 1, dim)
        padded_k[slots], padded_q[slots] = new_k, new_q
        keys, values = view.update(padded_k, padded_k + 1, 0)
        assert keys.shape == (rows, heads, view.keys, dim)
        got = _attend(padded_q, keys, values, view.attention_mask(new_q.dtype))[slots]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        eager.advance()
        static.bind(slots, 1)  # the runtime advances the real rows after the step
        static.advance()
    assert static.lengths.tolist() == eager.lengths.tolist()
    # the storage did not move: captured steps keep reading it
    key = static.storage_key()
    static.reserve(layers, heads, dim, torch.float32, slots=6, length=32)
    assert static.storage_key() == key
    static.reserve(layers, heads, dim, torch.float32, slots=6, length=64)
    assert static.storage_key() != key
    assert static.storage(1)[0].shape == (6, heads, 64, dim)


def test_static_kv_cache_returns_what_a_dynamic_cache_returns() -> None:
    gen = torch.Generator().manual_seed(1)
    static = StaticKVCache(2, 3, 2, 6, 4, torch.float32, "cpu")
    for _ in range(2):  # reset between uses
        static.reset()
        dynamic = DynamicCache()
        for seq in (2, 1, 1, 1):
            for layer in range(2):
                k = torch.randn(3, 2, seq, 4, generator=gen)
                a = dynamic.update(k, k * 3, layer)
                b = static.update(k, k * 3, layer)
                assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
                assert b[0].is_contiguous()
            assert static.get_seq_length() == dynamic.get_seq_length()
    with pytest.raises(ValueError, match="holds 6"):
        static.update(torch.zeros(3, 2, 2, 4), torch.zeros(3, 2, 2, 4), 0)


def test_graph_runner_runs_eagerly_off_cuda_and_reports_why() -> None:
    runner = GraphRunner("test", "cpu")
    assert runner.path == "static" and "no CUDA graphs on cpu" in runner.report()["reason"]
    state = torch.zeros(3)
    out = runner.run((4,), lambda: (state + 1, state * 2))
    assert [t.tolist() for t in out] == [[1.0] * 3, [0.0] * 3]
    assert runner.report()["eager_calls"] == 1 and runner.report()["replays"] == 0
    with pytest.raises(TypeError, match="tuple of tensors"):
        runner.run((4,), lambda: state)  # type: ignore[arg-type, return-value]
    runner.drop((4,))  # no graph for it: nothing to forget, no error
    assert not runner.has((4,))
    quiet = GraphRunner("off", "cpu", capture=False)
    assert quiet.report()["reason"] is None and quiet.path == "static"
    quiet.disable("a test said so")
    assert quiet.path == "static (fallback)" and quiet.report()["reason"] == "a test said so"


def test_emulated_capture_warms_up_then_replays_into_the_captured_outputs() -> None:
    """The test kit's CPU stand-in for capture: ``warmup + 1`` calls when a key is captured,
    then every run (the first one too) a replay that reruns the step into the captured
    tensors; callers get clones."""
    from omni_core.testing import emulate_graph_capture

    runner = emulate_graph_capture(GraphRunner("emulated", "cpu", warmup=2))
    assert runner.path == "cuda-graphs"
    state, calls = torch.zeros(2), []

    def step() -> tuple[torch.Tensor, ...]:
        calls.append(1)
        return (state + 1,)

    (first,) = runner.run("k", step)
    assert len(calls) == 4 and first.tolist() == [1.0, 1.0]
    state += 5
    (second,) = runner.run("k", step)
    assert len(calls) == 5 and second.tolist() == [6.0, 6.0] and first.tolist() == [1.0, 1.0]
    report = runner.report()
    assert (report["captured"], report["replays"], report["eager_calls"]) == (1, 2, 0)
    assert report["graphs"] == ["k"]


def test_graph_runner_takes_a_fresh_pool_once_its_last_graph_is_gone() -> None:
    """The allocator retires a pool whose graphs are all gone; capturing into its old handle
    fails an internal assert (seen on an H200 when Dia's text storage grew and its graphs were
    cleared), so the runner forgets the handle with its last graph and keeps it otherwise."""
    from omni_core.testing import emulate_graph_capture

    runner = emulate_graph_capture(GraphRunner("pool", "cpu"))
    for key in ("a", "b"):
        runner.run(key, lambda: (torch.ones(1),))
    handle = runner._pool = object()  # what torch.cuda.graph_pool_handle() set on CUDA
    runner.drop("a")
    assert runner._pool is handle  # "b" still lives in it
    runner.drop("b")
    assert runner._pool is None
    for reset in (lambda: runner.clear("storage grew"), lambda: runner.disable("test")):
        runner.capture = True
        runner.run("c", lambda: (torch.ones(1),))
        runner._pool = object()
        reset()
        assert runner._pool is None and not runner.has("c")
