"""The codec's streamed chunks at static shapes, replayed as CUDA graphs.

Eager, the 12 Hz decoder spends a chunk launching hundreds of small kernels (its transformer,
upsampling convolutions and SnakeBeta activations): ~40 ms per chunk on an H200 whatever the
batch, which is the largest part of the first audio. A streamed request's chunks come in few
shapes: ``first`` frames without context, then ``rest`` frames after a context that grows
``first, first + rest, ...`` up to :attr:`CodecStage.left_context`. Every stage of the decoder
is causal, so frames appended after a chunk do not change its samples: a shorter last chunk is
padded on the right to ``rest`` frames, and rows are padded to a batch bucket. Each (rows,
context, frames) shape is one graph (the schedule's shapes captured at the first chunk of the
warm-up request, any other context — a cloned voice's reference codes — on first use, the
least recently used dropped past :data:`MAX_GRAPHS`). Shapes no schedule makes (a whole
utterance decoded at once) run eagerly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch

from omni_core.runtime import GraphRunner, batch_buckets, bucket_for, precapture
from omni_core.speech import ChunkSchedule

from .stages import CodecStage

if TYPE_CHECKING:  # pragma: no cover
    from .model import Qwen3TTSModel

#: Codec graphs kept at once (each holds its output and shares the pool's scratch memory).
MAX_GRAPHS = 64
#: Longest chunk (frames) run at a static shape; longer ones (a whole answer) run eagerly.
MAX_CHUNK_FRAMES = 64


class GraphCodecStage(CodecStage):
    """:class:`CodecStage` padded to static shapes and replayed (module doc).

    ``capture``: CUDA graphs (on CUDA); False runs the same padded shapes eagerly (what the CPU
    tests check). ``rows``: the largest batch (the runtime's slots).
    """

    def __init__(
        self,
        model: Qwen3TTSModel,
        schedule: ChunkSchedule,
        rows: int,
        *,
        capture: bool = True,
    ) -> None:
        super().__init__(model)
        self.runner = GraphRunner("qwen3-tts codec", model.device, capture=capture)
        self.first, self.rest, self.rows = int(schedule.first), int(schedule.rest), int(rows)
        self.codebooks = int(model.num_code_groups)
        self._inputs: OrderedDict[tuple[int, int, int], torch.Tensor] = OrderedDict()
        self._warmed = False

    def report(self) -> dict[str, Any]:
        return self.runner.report()

    def shape(self, rows: int, context: int, frames: int) -> tuple[int, int, int] | None:
        """The static (rows, context, frames) a chunk runs at, or None: eagerly."""
        sizes = sorted(s for s in (self.first, self.rest) if s >= frames)
        if not sizes or sizes[0] > MAX_CHUNK_FRAMES or rows > self.rows:
            return None
        return min(bucket_for(rows), self.rows), context, sizes[0]

    def schedule_shapes(self) -> list[tuple[int, int, int]]:
        """Every shape the chunk schedule makes for a request without reference codes."""
        contexts, made = [(0, self.first)], self.first
        while made < self.left_context:
            contexts.append((made, self.rest))
            made += self.rest
        contexts.append((self.left_context, self.rest))
        keys = {(b, c, f) for c, f in contexts for b in batch_buckets(self.rows)}
        return sorted(keys, key=lambda k: (k[1], k[2], k[0]))

    def _fn(self, key: tuple[int, int, int]) -> Any:
        rows, context, frames = key
        buffer = self._inputs.get(key)
        if buffer is None:
            shape = (rows, self.codebooks, context + frames)
            buffer = torch.zeros(shape, dtype=torch.long, device=self.model.device)
            self._inputs[key] = buffer
        self._inputs.move_to_end(key)
        while len(self._inputs) > MAX_GRAPHS:
            old, _ = self._inputs.popitem(last=False)
            self.runner.drop(old)
        codec = self.model.codec

        def step() -> tuple[torch.Tensor, ...]:
            return (codec.decode_chunk(buffer, context=context),)

        return step

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        rows, _, length = codes.shape
        frames = length - context
        key = self.shape(rows, context, frames)
        if key is None:
            return super().decode(codes, context)
        if not self._warmed:
            self._warmed = True
            precapture(self.runner, self.schedule_shapes(), key, self._fn)
        fn = self._fn(key)
        self._inputs[key][:rows, :, :length].copy_(codes)
        (audio,) = self.runner.run(key, fn)
        return audio[:rows, : frames * self.samples_per_frame]


def codec_stage(model: Qwen3TTSModel, mode: str, schedule: ChunkSchedule, rows: int) -> CodecStage:
    """The codec stage of the ``cuda_graphs`` mode (as :func:`.graphs.decode_stages`): graphs
    on CUDA for ``on``, the padded shapes eagerly for ``static``, the plain stage otherwise."""
    if mode == "off" or (mode == "on" and model.device.type != "cuda"):
        return CodecStage(model)
    return GraphCodecStage(model, schedule, rows, capture=mode == "on")


def codec_report(stage: CodecStage | None) -> dict[str, Any]:
    """What the codec ran as, for :meth:`Qwen3TTSPipeline.decode_report`."""
    if isinstance(stage, GraphCodecStage):
        return stage.report()
    return {"path": "eager" if stage is not None else "not built yet"}
