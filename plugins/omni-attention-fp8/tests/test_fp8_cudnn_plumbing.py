"""fp8-cudnn's plumbing on CPU: layouts, the graph description, the cache, the custom op.

cuDNN itself runs only on a Hopper GPU (bench/fp8_attention_kernel.py measures it there). Here
a stand-in ``cudnn`` module records what the graph API is asked, and the graph cache is told
cuDNN refused, so the op's own fallback (the same fp8 inputs on torch SDPA) runs: everything
around the kernel call is the code that runs on the GPU.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import pytest
import torch

from omni_attention_fp8 import cudnn_graph, cudnn_kernel
from omni_attention_fp8.cudnn_graph import Fp8Graph, GraphCache, describe_graph
from omni_attention_fp8.emulated import fp8_emulated
from omni_attention_fp8.layout import (
    GraphKey,
    Uid,
    attention_flops,
    bhsd_layout,
    graph_key,
    is_key_padding_mask,
    unsupported_reason,
)
from omni_attention_fp8.scales import P_SCALE, valid_keys_first
from omni_attention_fp8.testing import exact_attention, fp8_error_bound

KEY = GraphKey(batch=2, heads=3, q_len=40, kv_len=24, head_dim=32, value_dim=16, attn_scale=0.2,
               device=0)  # fmt: skip


def test_bhsd_layout_describes_omni_tensors_without_a_copy() -> None:
    x = torch.empty(2, 40, 3, 32)  # omni's [B, S, H, D]
    dims, strides = bhsd_layout(2, 40, 3, 32)
    view = x.transpose(1, 2)  # the logical (B, H, S, D) cuDNN is told about
    assert tuple(view.shape) == dims and view.stride() == strides


@pytest.mark.parametrize(
    ("q", "k", "v", "reason"),
    [
        ((2, 40, 3, 32), (2, 24, 3, 32), (2, 24, 3, 16), None),
        ((2, 40, 3, 12), (2, 24, 3, 12), (2, 24, 3, 12), "head dim 12 is not a multiple of 16"),
        ((2, 40, 3, 512), (2, 24, 3, 512), (2, 24, 3, 64), "head dim 512 is not a multiple"),
        ((2, 40, 4, 32), (2, 24, 2, 32), (2, 24, 2, 32), "grouped heads"),
        ((2, 40, 3, 32), (1, 24, 3, 32), (1, 24, 3, 32), "batch or key length differ"),
        ((2, 40, 3, 32), (2, 24, 3, 64), (2, 24, 3, 64), "q and k head dims differ"),
        ((2, 40, 96), (2, 24, 96), (2, 24, 96), "must be [batch, seq, heads, head_dim]"),
    ],
)
def test_unsupported_shapes_are_named(q, k, v, reason) -> None:
    found = unsupported_reason(q, k, v)
    assert (found is None) if reason is None else (reason in found)


def test_graph_key_and_flops() -> None:
    key = graph_key((2, 40, 3, 32), (2, 24, 3, 32), (2, 24, 3, 16), 0.2, 0)
    assert key == KEY
    assert attention_flops(key) == 2 * 3 * 2 * 40 * 24 * (32 + 16)


class _Recorder:
    """Stands in for one cudnn graph tensor: records every ``set_*`` call."""

    def __init__(self, log: list, name: str, **fields: Any) -> None:
        self.name, self.fields, self.log = name, dict(fields), log

    def __getattr__(self, attr: str) -> Any:
        if not attr.startswith("set_"):
            raise AttributeError(attr)

        def setter(value: Any) -> _Recorder:
            self.fields[attr.removeprefix("set_")] = value
            return self

        return setter


def _stand_in_cudnn() -> tuple[types.SimpleNamespace, list]:
    log: list = []

    class Graph:
        def __init__(self, **kwargs: Any) -> None:
            log.append(("pygraph", kwargs))

        def tensor(self, **kwargs: Any) -> _Recorder:
            return _Recorder(log, "tensor", **kwargs)

        def sdpa_fp8(self, **kwargs: Any) -> tuple:
            log.append(("sdpa_fp8", kwargs))
            return tuple(_Recorder(log, n) for n in ("O", "Stats", "Amax_S", "Amax_O"))

    data_type = types.SimpleNamespace(FP8_E4M3="fp8", FLOAT="f32")
    return types.SimpleNamespace(pygraph=Graph, data_type=data_type), log


def test_graph_description_matches_the_recipe() -> None:
    cudnn, log = _stand_in_cudnn()
    describe_graph(cudnn, KEY, handle="h")
    (_, graph_args), (_, call) = log
    assert graph_args == {
        "io_data_type": "fp8",
        "intermediate_data_type": "f32",
        "compute_data_type": "f32",
        "handle": "h",
    }
    assert call["attn_scale"] == 0.2 and call["generate_stats"] is False
    q, k, v = call["q"].fields, call["k"].fields, call["v"].fields
    assert (q["uid"], q["dim"], q["stride"], q["data_type"]) == (
        Uid.Q,
        (2, 3, 40, 32),
        (40 * 3 * 32, 32, 3 * 32, 1),
        "fp8",
    )
    assert (k["dim"], v["dim"]) == ((2, 3, 24, 32), (2, 3, 24, 16))
    names = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    for name in names:
        scale = call[name].fields
        assert (scale["dim"], scale["data_type"]) == ((1, 1, 1, 1), "f32"), name
    assert [call[n].fields["uid"] for n in names] == [
        Uid.DESCALE_Q,
        Uid.DESCALE_K,
        Uid.DESCALE_V,
        Uid.DESCALE_S,
        Uid.SCALE_S,
        Uid.SCALE_O,
    ]


def test_execute_fills_the_variant_pack_by_uid() -> None:
    seen: dict = {}

    class Planned:
        def execute(self, pack: dict, workspace: torch.Tensor, handle: Any) -> None:
            seen.update(pack=pack, workspace=workspace.numel(), handle=handle)

    const = {Uid.SCALE_S: torch.full((1, 1, 1, 1), P_SCALE)}
    graph = Fp8Graph(Planned(), 64, const, {Uid.AMAX_O: torch.zeros(1, 1, 1, 1)})
    q8, k8, v8, out8 = (torch.zeros(1).to(torch.float8_e4m3fn) for _ in range(4))
    descale = torch.ones(1, 1, 1, 1)
    graph.execute("h", q8, k8, v8, descale, out8)
    pack = seen["pack"]
    assert seen["workspace"] == 64 and seen["handle"] == "h"
    assert pack[int(Uid.Q)] is q8 and pack[int(Uid.O)] is out8
    assert pack[int(Uid.DESCALE_Q)] is descale and int(Uid.SCALE_S) in pack
    assert int(Uid.AMAX_O) in pack and all(isinstance(k, int) for k in pack)


def test_a_refused_shape_warns_once_and_is_remembered(monkeypatch) -> None:
    cache = GraphCache()
    monkeypatch.setattr(cache, "handle", lambda device: "h")
    calls = []

    def refuse(key, handle, device):
        calls.append(key)
        raise RuntimeError("GRAPH_NOT_SUPPORTED: d=24")

    monkeypatch.setattr(cudnn_graph, "build_graph", refuse)
    with pytest.warns(RuntimeWarning, match="fp8-cudnn: cuDNN cannot build fp8 attention"):
        assert cache.get(KEY, torch.device("cpu")) == (None, "h")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get(KEY, torch.device("cpu")) == (None, "h")
    assert calls == [KEY] and "GRAPH_NOT_SUPPORTED" in cache.refused[KEY]


@pytest.fixture
def refused(monkeypatch) -> None:
    """The process's graph cache answers "cuDNN refused": the op runs its SDPA fallback."""
    monkeypatch.setattr(cudnn_kernel.GRAPHS, "get", lambda key, device: (None, None))


def _qkv(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 40, 3, 32, generator=g)
    return q, torch.randn(2, 24, 3, 32, generator=g) + 1.0, torch.randn(2, 24, 3, 16, generator=g)


def test_fp8_cudnn_on_its_fallback_is_within_the_fp8_bound(refused) -> None:
    q, k, v = _qkv()
    out = cudnn_kernel.fp8_cudnn(q, k, v)
    assert out.shape == (2, 40, 3, 16) and out.dtype == q.dtype
    _, exact = exact_attention(q, k, v, q.shape[-1] ** -0.5)
    error = (out.double() - exact).abs()
    assert bool((error <= fp8_error_bound(q, k, v) + 1e-5 * exact.abs().amax()).all())
    assert float((out.double() - exact).norm() / exact.norm()) > 0.004  # fp8, not exact


def test_fp8_cudnn_runs_the_planned_graph_and_dequantizes(monkeypatch) -> None:
    """With a graph "built", the op allocates the fp8 output and hands it to execute."""
    calls = []

    class Planned:
        def execute(self, handle, q8, k8, v8, qk_descale, out8, kv_lens):
            calls.append((q8.dtype, out8.shape, out8.dtype, kv_lens))
            out8.copy_(cudnn_kernel.fp8_inputs_on_sdpa(q8, k8, v8, qk_descale, 32**-0.5))

    monkeypatch.setattr(cudnn_kernel.GRAPHS, "get", lambda key, device: (Planned(), "h"))
    q, k, v = _qkv(1)
    out = cudnn_kernel.fp8_cudnn(q, k, v)
    assert calls == [(torch.float8_e4m3fn, (2, 40, 3, 16), torch.float8_e4m3fn, None)]
    _, exact = exact_attention(q, k, v, q.shape[-1] ** -0.5)
    assert float((out.double() - exact).norm() / exact.norm()) < 0.1


def test_masked_and_unsupported_calls_run_exact_sdpa(monkeypatch) -> None:
    from omni_core.runtime import sdpa

    monkeypatch.setattr(cudnn_kernel.GRAPHS, "get", pytest.fail)  # never reached
    q, k, v = _qkv(2)
    mask = torch.ones(2, 1, 40, 24, dtype=torch.bool)
    torch.testing.assert_close(cudnn_kernel.fp8_cudnn(q, k, v, attn_mask=mask), sdpa(q, k, v))
    q12, k12, v12 = q[..., :12], k[..., :12], v[..., :12]
    torch.testing.assert_close(cudnn_kernel.fp8_cudnn(q12, k12, v12), sdpa(q12, k12, v12))


def test_the_custom_op_passes_torch_opcheck(refused) -> None:
    """The fake (meta) kernel agrees with the real one: what torch.compile traces with.

    (opcheck's schema test multiplies its inputs, which fp8 tensors do not support on CPU.)"""
    q, k, v = _qkv(3)
    q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    descale = torch.full((1, 1, 1, 1), 0.5)
    torch.library.opcheck(
        cudnn_kernel.sdpa_fp8,
        (q8, k8, v8, descale, 0.2),
        test_utils=("test_faketensor",),
    )


def test_compiled_attention_has_no_graph_break(refused) -> None:
    import torch._dynamo

    q, k, v = _qkv(4)
    explained = torch._dynamo.explain(cudnn_kernel.fp8_cudnn)(q, k, v)
    assert explained.graph_break_count == 0, explained.break_reasons


# -- key-padding masks (Qwen-Image's text padding when CFG is batched) ----------------------------


@pytest.mark.parametrize(
    ("shape", "is_bool", "expected"),
    [
        ((2, 1, 1, 24), True, True),
        ((1, 1, 1, 24), True, True),
        ((2, 1, 1, 24), False, False),  # an additive mask
        ((2, 3, 1, 24), True, False),  # per head
        ((2, 1, 40, 24), True, False),  # per query
        ((2, 1, 1, 23), True, False),
    ],
)
def test_key_padding_masks_are_recognised_by_shape(shape, is_bool, expected) -> None:
    assert is_key_padding_mask(shape, is_bool, 2, 24) is expected


def _padding_mask() -> torch.Tensor:
    keep = torch.ones(2, 24, dtype=torch.bool)
    keep[0, 3:9] = False  # Qwen-Image pads the text in the middle of [text, image]
    keep[1, 20:] = False
    return keep[:, None, None, :]


def test_valid_keys_first_is_exact() -> None:
    from omni_core.runtime import sdpa

    q, k, v = _qkv(5)
    mask = _padding_mask()
    k2, v2, lens = valid_keys_first(mask.reshape(2, 24), k, v)
    assert lens.reshape(-1).tolist() == [18, 20] and lens.dtype == torch.int32
    prefix = torch.arange(24)[None, None, None, :] < lens
    torch.testing.assert_close(sdpa(q, k2, v2, attn_mask=prefix), sdpa(q, k, v, attn_mask=mask))


def test_padded_graph_description_has_seq_lens() -> None:
    cudnn, log = _stand_in_cudnn()
    cudnn.data_type.INT32 = "i32"
    describe_graph(cudnn, GraphKey(**{**KEY.__dict__, "padded": True}), handle=None)
    call = log[1][1]
    assert call["use_padding_mask"] is True
    for name, uid in (("seq_len_q", Uid.SEQ_LEN_Q), ("seq_len_kv", Uid.SEQ_LEN_KV)):
        fields = call[name].fields
        assert (fields["uid"], fields["dim"], fields["data_type"]) == (uid, (2, 1, 1, 1), "i32")
    cudnn, log = _stand_in_cudnn()
    describe_graph(cudnn, KEY, handle=None)
    assert "use_padding_mask" not in log[1][1]


def test_key_padding_mask_runs_fp8_on_the_padded_graph(monkeypatch) -> None:
    from omni_core.runtime import sdpa

    asked = []

    def refuse(key, device):
        asked.append(key)
        return None, None

    monkeypatch.setattr(cudnn_kernel.GRAPHS, "get", refuse)
    q, k, v = _qkv(6)
    mask = _padding_mask()
    exact = sdpa(q.double(), k.double(), v.double(), attn_mask=mask)
    rel = lambda out: float((out.double() - exact).norm() / exact.norm())  # noqa: E731
    kernel, emulated = (
        cudnn_kernel.fp8_cudnn(q, k, v, attn_mask=mask),
        fp8_emulated(q, k, v, attn_mask=mask),
    )
    assert [key.padded for key in asked] == [True]
    assert 0.004 < rel(kernel) < 0.1 and 0.004 < rel(emulated) < 0.1, (rel(kernel), rel(emulated))
    unmasked = sdpa(q.double(), k.double(), v.double())
    assert float((emulated.double() - unmasked).norm() / unmasked.norm()) > 0.1  # mask applied
