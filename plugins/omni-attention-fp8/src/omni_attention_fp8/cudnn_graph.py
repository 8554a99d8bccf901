"""cuDNN's fp8 flash attention through the cudnn frontend's graph API, one built graph per shape.

A graph is built (validated, lowered, planned with heuristics A then FALLBACK) the first time a
:class:`~omni_attention_fp8.layout.GraphKey` is seen and kept in :data:`GRAPHS`; later calls of
the shape only fill a variant pack and execute on torch's current stream. Inputs are the fp8
tensors of :mod:`omni_attention_fp8.scales`; ``descale_q`` is the per-call ``1 / C`` device
tensor, the other scales are constants of the recipe (``descale_k = descale_v = scale_o = 1``,
``scale_s = P_SCALE``, ``descale_s = 1 / P_SCALE``) kept on the device once. On Hopper the
kernel writes its output in fp8 (bf16 output is Blackwell-only in cuDNN 9.13+).

``cudnn`` is imported when a graph is built, never at import time: this module loads anywhere.
"""

from __future__ import annotations

import importlib.util
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_attention_fp8.layout import GraphKey, Uid, bhsd_layout
from omni_attention_fp8.scales import P_SCALE
from omni_core import Availability

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: cuDNN backend versions: fp8 SDPA forward needs 9.1; 9.10.0 has it disabled.
MIN_BACKEND = 90100
BROKEN_BACKENDS = (91000,)
#: The frontend versions tried (the ``cudnn`` extra's pin).
FRONTEND_PIN = "nvidia-cudnn-frontend>=1.32,<2"


def fp8_cudnn_available() -> Availability:
    """Whether cuDNN's fp8 attention can run here, and plainly why not."""
    import torch

    if getattr(torch.version, "hip", None):
        return Availability.no("ROCm build of torch: cuDNN is NVIDIA's")
    if not torch.cuda.is_available():
        return Availability.no("no CUDA device (torch.cuda.is_available() is False)")
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        return Availability.no(
            f"cuDNN's fp8 attention needs compute capability 9.0+ (Hopper); this GPU is "
            f"{major}.{minor}"
        )
    if importlib.util.find_spec("cudnn") is None:
        return Availability.no(
            "nvidia-cudnn-frontend is not installed (pip install 'omni-attention-fp8[cudnn]')"
        )
    try:
        import cudnn  # type: ignore[import-not-found]

        version = int(cudnn.backend_version())
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
        return Availability.no(f"the cudnn frontend does not load: {type(exc).__name__}: {exc}")
    if version < MIN_BACKEND or version in BROKEN_BACKENDS:
        return Availability.no(f"cuDNN {version} cannot run fp8 attention (9.1+, not 9.10.0)")
    return Availability.yes()


@dataclass
class Fp8Graph:
    """One built graph and what executing it needs besides the call's own tensors."""

    graph: Any
    workspace_size: int
    constants: dict[int, torch.Tensor]
    #: The kernel's amax outputs (unused by the recipe, but the graph writes them).
    amax: dict[int, torch.Tensor]

    def execute(
        self,
        handle: Any,
        q8: torch.Tensor,
        k8: torch.Tensor,
        v8: torch.Tensor,
        qk_descale: torch.Tensor,
        out8: torch.Tensor,
        kv_lens: torch.Tensor | None = None,
    ) -> None:
        import torch

        pack: dict[int, torch.Tensor] = {} if kv_lens is None else {Uid.SEQ_LEN_KV: kv_lens}
        pack |= {
            Uid.Q: q8,
            Uid.K: k8,
            Uid.V: v8,
            Uid.O: out8,
            Uid.DESCALE_Q: qk_descale,
            **self.constants,
            **self.amax,
        }
        workspace = torch.empty(self.workspace_size, device=q8.device, dtype=torch.uint8)
        self.graph.execute({int(k): v for k, v in pack.items()}, workspace, handle=handle)


def describe_graph(cudnn: Any, key: GraphKey, handle: Any) -> Any:
    """The fp8 SDPA graph of ``key``, described with ``cudnn``'s graph API (not yet built):
    fp8 q/k/v/o over ``[B, S, H, D]`` memory, float32 ``[1, 1, 1, 1]`` scales, no stats."""
    fp8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    graph = cudnn.pygraph(
        io_data_type=fp8, intermediate_data_type=f32, compute_data_type=f32, handle=handle
    )

    def operand(uid: Uid, seq: int, dim: int) -> Any:
        dims, strides = bhsd_layout(key.batch, seq, key.heads, dim)
        return graph.tensor(uid=int(uid), dim=dims, stride=strides, data_type=fp8)

    def scalar(uid: Uid) -> Any:
        return graph.tensor(uid=int(uid), dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=f32)

    padding: dict[str, Any] = {}
    if key.padded:  # valid keys first: seq_len_kv per batch row, every query row kept
        lens = {"dim": (key.batch, 1, 1, 1), "stride": (1, 1, 1, 1)}
        padding = {
            "use_padding_mask": True,
            "seq_len_q": graph.tensor(
                uid=int(Uid.SEQ_LEN_Q), data_type=cudnn.data_type.INT32, **lens
            ),
            "seq_len_kv": graph.tensor(
                uid=int(Uid.SEQ_LEN_KV), data_type=cudnn.data_type.INT32, **lens
            ),
        }
    o, _, amax_s, amax_o = graph.sdpa_fp8(
        q=operand(Uid.Q, key.q_len, key.head_dim),
        k=operand(Uid.K, key.kv_len, key.head_dim),
        v=operand(Uid.V, key.kv_len, key.value_dim),
        descale_q=scalar(Uid.DESCALE_Q),
        descale_k=scalar(Uid.DESCALE_K),
        descale_v=scalar(Uid.DESCALE_V),
        descale_s=scalar(Uid.DESCALE_S),
        scale_s=scalar(Uid.SCALE_S),
        scale_o=scalar(Uid.SCALE_O),
        generate_stats=False,
        attn_scale=key.attn_scale,
        use_causal_mask=False,
        name="omni_fp8_sdpa",
        **padding,
    )
    dims, strides = bhsd_layout(key.batch, key.q_len, key.heads, key.value_dim)
    o.set_uid(int(Uid.O)).set_output(True).set_dim(dims).set_stride(strides).set_data_type(fp8)
    for tensor, uid in ((amax_s, Uid.AMAX_S), (amax_o, Uid.AMAX_O)):
        tensor.set_uid(int(uid)).set_output(True).set_dim((1, 1, 1, 1)).set_stride(
            (1, 1, 1, 1)
        ).set_data_type(f32)
    return graph


def build_graph(key: GraphKey, handle: Any, device: torch.device) -> Fp8Graph:
    """Describe, validate and plan the graph of ``key`` (heuristics A, then FALLBACK), with its
    constant scales on ``device``; raises cudnn's error when it cannot."""
    import cudnn  # type: ignore[import-not-found]
    import torch

    graph = describe_graph(cudnn, key, handle)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()

    def const(value: float) -> torch.Tensor:
        return torch.full((1, 1, 1, 1), value, dtype=torch.float32, device=device)

    constants = {
        Uid.DESCALE_K: const(1.0),
        Uid.DESCALE_V: const(1.0),
        Uid.DESCALE_S: const(1.0 / P_SCALE),
        Uid.SCALE_S: const(P_SCALE),
        Uid.SCALE_O: const(1.0),
    }
    if key.padded:
        constants[Uid.SEQ_LEN_Q] = torch.full(
            (key.batch, 1, 1, 1), key.q_len, dtype=torch.int32, device=device
        )
    amax = {Uid.AMAX_S: const(0.0), Uid.AMAX_O: const(0.0)}
    return Fp8Graph(graph, int(graph.get_workspace_size()), constants, amax)


@dataclass
class GraphCache:
    """Built graphs by key, one cudnn handle per device, and the keys cuDNN refused (once)."""

    graphs: dict[GraphKey, Fp8Graph] = field(default_factory=dict)
    refused: dict[GraphKey, str] = field(default_factory=dict)
    handles: dict[int, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, device: torch.device) -> Any:
        """The device's cudnn handle, bound to torch's current stream there."""
        import cudnn  # type: ignore[import-not-found]
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        handle = self.handles.get(index)
        if handle is None:
            with torch.cuda.device(index):
                handle = self.handles[index] = cudnn.create_handle()
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream(index).cuda_stream)
        return handle

    def get(self, key: GraphKey, device: torch.device) -> tuple[Fp8Graph | None, Any]:
        """``(graph, handle)``; the graph is None when cuDNN refused ``key`` (warned once)."""
        handle = self.handle(device)
        graph = self.graphs.get(key)
        if graph is not None or key in self.refused:
            return graph, handle
        with self.lock:
            if key not in self.graphs and key not in self.refused:
                try:
                    self.graphs[key] = build_graph(key, handle, device)
                except Exception as exc:  # noqa: BLE001 - cuDNN's refusal is a fallback
                    self.refused[key] = f"{type(exc).__name__}: {exc}"
                    warnings.warn(
                        f"fp8-cudnn: cuDNN cannot build fp8 attention for {key}: "
                        f"{self.refused[key]}; this shape runs fp8 inputs on torch SDPA",
                        RuntimeWarning,
                        stacklevel=3,
                    )
        return self.graphs.get(key), handle


#: The process's graphs (one per shape, dtype and device seen).
GRAPHS = GraphCache()

__all__ = [
    "FRONTEND_PIN",
    "GRAPHS",
    "MIN_BACKEND",
    "Fp8Graph",
    "GraphCache",
    "build_graph",
    "describe_graph",
    "fp8_cudnn_available",
]
