"""Qwen2.5-Omni's token2wav DiT forward replayed as CUDA graphs (the ``cuda_graphs`` option).

One token2wav decode runs its DiT 36 times (10 ODE time points, RK4: four evaluations per
interval, the batch doubled for CFG) over a few hundred positions. Each forward is hundreds of
small kernels, so it is bound by their launches, not by the GPU: about 30 ms eager for the 7B
model's 22-layer DiT on an H200, over a second per streamed chunk and per row.

transformers' own code stays as it is: its ODE solver, its noise and BigVGAN run eagerly; only
``Qwen2_5OmniToken2WavDiTModel.forward`` is captured per input shape and replayed through
:class:`omni_core.runtime.GraphRunner` (no host reads inside it). On an H200 the waveform stayed
within
1.5e-4 of the eager path's (kernel choice under capture; ``bench/omni_chat_bench.py`` measures
it); on CPU nothing is captured. The graphed forward is swapped in only inside
:meth:`GraphedDiT.scope`, around omni's own decode, so nothing else that holds the model
(transformers' ``generate``) sees it.

A shape is captured at its second forward call, so within its first decode (the other 34
evaluations of that decode replay it already), and the :attr:`MAX_GRAPHS` shapes used last are
kept (an LRU: a new whole-answer length evicts the graph used longest ago, which is captured
again if it comes back; the chunk lengths of streamed answers recur and stay). Off CUDA, with
``cuda_graphs=off``, or after a failed capture (the reason is logged and in
:meth:`GraphedDiT.report`) the forward is transformers' eager one.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: The DiT's tensor inputs, in the order its forward takes them.
INPUTS = ("hidden_states", "condition_vector", "speaker_embedding", "quantized_code", "time_step")


class GraphedDiT:
    """The DiT's forward as replayed CUDA graphs, per input shape (module doc)."""

    MAX_GRAPHS = 16

    def __init__(self, dit: Any, capture: bool) -> None:
        from omni_core.runtime import GraphRunner

        self.dit = dit
        device = next(dit.parameters()).device
        self.runner = GraphRunner("qwen2.5-omni token2wav DiT", device, capture=capture, warmup=1)
        #: Forward calls per shape not captured yet (bounded: cleared when it grows large).
        self._seen: dict[Hashable, int] = {}
        #: The captured shapes' input buffers, least recently used first.
        self._inputs: OrderedDict[Hashable, tuple[torch.Tensor, ...]] = OrderedDict()

    def report(self) -> dict[str, Any]:
        return self.runner.report()

    @contextmanager
    def scope(self) -> Iterator[None]:
        """The DiT's forward is the graphed one inside this block (module doc)."""
        if not self.runner.capture:
            yield
            return
        eager = self.dit.forward
        self.dit.forward = functools.partial(self._forward, eager)
        try:
            yield
        finally:
            del self.dit.forward  # the class's own forward again

    def _forward(
        self,
        eager: Any,
        *args: Any,
        drop_audio_conditioning: bool = False,
        drop_code: bool = False,
        apply_cfg: bool = True,
        **named: Any,
    ) -> torch.Tensor:
        import torch

        flags = {
            "drop_audio_conditioning": drop_audio_conditioning,
            "drop_code": drop_code,
            "apply_cfg": apply_cfg,
        }
        values = list(args) + [named[name] for name in INPUTS[len(args) :] if name in named]
        if (
            any(name not in INPUTS for name in named)
            or len(values) != len(INPUTS)
            or not all(isinstance(v, torch.Tensor) for v in values)
        ):  # a call this wrapper does not know: transformers' own forward
            return eager(*args, **flags, **named)
        key = (
            tuple((tuple(v.shape), v.dtype) for v in values),
            drop_audio_conditioning,
            drop_code,
            apply_cfg,
        )
        static = self._inputs.get(key)
        if static is None:
            if len(self._seen) > 64 * self.MAX_GRAPHS:
                self._seen.clear()
            self._seen[key] = self._seen.get(key, 0) + 1
            if self._seen[key] < 2:
                return eager(*values, **flags)
            del self._seen[key]
            if len(self._inputs) >= self.MAX_GRAPHS:
                old, _ = self._inputs.popitem(last=False)
                self.runner.drop(old)
            static = self._inputs[key] = tuple(v.clone() for v in values)
        else:
            self._inputs.move_to_end(key)
            for buffer, value in zip(static, values, strict=True):
                buffer.copy_(value)
        return self.runner.run(key, lambda: (eager(*static, **flags),))[0]


class FixedSpeaker:
    """The DiT's ECAPA speaker encoding, computed once per decode instead of at every forward.

    transformers' DiT input embedding runs its ``spk_encoder`` (an ECAPA-TDNN over the
    speaker's reference mel) inside every forward: 36 times per decode on the same input (the
    reference and, for CFG, zeros), ~30% of a decode's GPU time on an H200. Inside
    :meth:`scope`, the encoder answers its output for that input, computed once there; the
    same kernels on the same input, so the audio is unchanged (lossless). Under graph capture
    the answer is a buffer per shape that later decodes refill, so replays read the current
    speaker's encoding. A call with another input shape runs the encoder.
    """

    def __init__(self, dit: Any, enabled: bool = True) -> None:
        self.encoder = dit.input_embed.spk_encoder
        #: False: the encoder runs at every forward, as in transformers (for an A/B).
        self.enabled = enabled
        self._buffers: dict[Hashable, torch.Tensor] = {}

    @contextmanager
    def scope(self, reference: torch.Tensor) -> Iterator[None]:
        """Forwards inside this block with ``condition_vector=reference`` and CFG on reuse one
        encoding of ``[reference; zeros]`` (what each of them passes the encoder)."""
        if not self.enabled:
            yield
            return
        import torch

        given = torch.cat([reference, torch.zeros_like(reference)])
        with torch.no_grad():
            encoded = self.encoder(given)
        # inference tensors (the runtime's steps) and normal ones cannot update each other
        key = (tuple(given.shape), given.dtype, given.device, torch.is_inference_mode_enabled())
        buffer = self._buffers.get(key)
        if buffer is None:  # one per batch size: captured graphs read it, so it is never freed
            buffer = self._buffers[key] = encoded
        else:
            buffer.copy_(encoded)
        run = self.encoder.forward

        def fixed(hidden: torch.Tensor, *args: Any, **named: Any) -> torch.Tensor:
            if tuple(hidden.shape) == key[0] and not args and not named:
                return buffer
            return run(hidden, *args, **named)

        self.encoder.forward = fixed
        try:
            yield
        finally:
            del self.encoder.forward  # the class's own forward again
