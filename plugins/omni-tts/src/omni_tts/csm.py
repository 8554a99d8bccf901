"""CSM (Sesame's conversational speech model) through transformers, streamed while it generates.

CSM is autoregressive over Mimi codec frames (12.5 frames/s): the backbone samples codebook 0,
the depth decoder the other codebooks of the frame. The pipeline runs transformers' own
``generate`` (same sampling, same seed => the same codes) in a producer thread and receives each
frame through generate's ``streamer`` hook. Every few frames it decodes the new frames with the
Mimi decoder and yields them, so the first audio is out after ``first_chunk_frames`` frames
instead of after the whole utterance.

Mimi's decoder is causal (causal convolutions, causal sliding-window attention), so decoding a
window of frames with ``context_frames`` of left context gives, for the new frames, the samples
that decoding the whole sequence gives (to float rounding, ~1e-6): the streamed audio equals
``generate(..., output_audio=True)``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from omni_core import GenerationRequest, PipelineOptions
from omni_core.speech import Voice
from omni_tts.common import TransformersSpeechPipeline, load_pretrained, request_seed

SPEAKERS = 4
_END = object()


class CsmExtras(BaseModel):
    """CSM request extras."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = Field(
        None, ge=1, le=4096, description="Frames to generate at most (80 ms each)."
    )
    first_chunk_frames: int = Field(2, ge=1, le=256, description="Frames in the first chunk.")
    chunk_frames: int = Field(6, ge=1, le=1024, description="Frames per later chunk.")
    context_frames: int | None = Field(
        None,
        ge=0,
        le=4096,
        description="Left context decoded with each chunk "
        "(default: the codec's attention window, which makes chunked decoding exact).",
    )


def speakers() -> list[Voice]:
    """The voices of every CSM checkpoint: speaker ids ``[0]`` .. ``[3]``."""
    return [
        Voice(id=f"speaker-{i}", name=f"Speaker {i}", description=f"CSM speaker id [{i}]")
        for i in range(SPEAKERS)
    ]


class _Cancelled(Exception):
    """Raised inside generate() (through the streamer) when the consumer went away."""


class _FrameStreamer:
    """generate()'s streamer hook: the first put is the prompt, each later put one frame.

    CSM's generate ignores custom stopping criteria, so cancellation (the client stopped
    reading) is signalled by raising from :meth:`put`, which ends generate() at the next frame.
    """

    def __init__(self, out: queue.Queue[Any], cancel: threading.Event) -> None:
        self.out = out
        self.cancel = cancel
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if self.cancel.is_set():
            raise _Cancelled
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.out.put(value[0])  # [num_codebooks] of batch row 0

    def end(self) -> None:
        pass


class CsmPipeline(TransformersSpeechPipeline):
    """``CsmForConditionalGeneration`` + ``CsmProcessor``; voices ``speaker-0`` .. ``speaker-3``
    map to CSM's ``[i]`` speaker prefix."""

    extras_model = CsmExtras

    def __init__(self, model: Any, processor: Any, options: PipelineOptions) -> None:
        super().__init__(options)
        self.model, self.processor = model, processor
        codec = model.codec_model.config
        self.sample_rate = int(codec.sampling_rate)
        window = int(getattr(codec, "sliding_window", 0) or 0)
        self.default_context = window + 4  # attention window (in >= frames) + conv margin
        self.eos = int(model.config.codebook_eos_token_id)

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> CsmPipeline:
        from transformers import AutoProcessor, CsmForConditionalGeneration

        model = load_pretrained(CsmForConditionalGeneration, path, options)
        processor = AutoProcessor.from_pretrained(path)
        return cls(model, processor, options)

    def voices(self) -> list[Voice]:
        return speakers()

    @classmethod
    def known_voices(cls) -> list[Voice] | None:
        """CSM's speaker ids are the same on every checkpoint."""
        return speakers()

    def prompt(self, request: GenerationRequest) -> Any:
        """Processor inputs for ``request`` exactly as the model card builds them."""
        speaker = int((request.voice or "speaker-0").rsplit("-", 1)[1])
        inputs = self.processor(f"[{speaker}]{request.prompt}", add_special_tokens=True)
        inputs.pop("token_type_ids", None)  # some tokenizers add them; generate() rejects them
        return inputs.to(self.device)

    def _decode(self, frames: list[Any], start: int, end: int, context: int) -> Any:
        import torch

        lo = max(0, start - context)
        codes = torch.stack(frames[lo:end]).to(self.device)  # [T, num_codebooks]
        with torch.inference_mode():
            audio = self.model.codec_model.decode(codes.transpose(0, 1).unsqueeze(0)).audio_values
        # Samples per frame as decoded (a shape, no sync); configs' frame_rate can disagree.
        hop = audio.shape[-1] // (end - lo)
        return self.to_numpy(audio[0, 0, (start - lo) * hop :])

    def synthesize(self, request: GenerationRequest) -> Iterator[Any]:
        extras = request.extras
        seed = request_seed(request)
        inputs = self.prompt(request)
        frames_q: queue.Queue[Any] = queue.Queue()
        cancel = threading.Event()

        kwargs: dict[str, Any] = {}
        if extras["max_new_tokens"] is not None:
            kwargs["max_new_tokens"] = extras["max_new_tokens"]

        def produce() -> None:
            try:
                with self.seeded(seed):
                    self.model.generate(
                        **inputs,
                        streamer=_FrameStreamer(frames_q, cancel),
                        **kwargs,
                    )
            except _Cancelled:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
                frames_q.put(exc)
            finally:
                frames_q.put(_END)

        worker = threading.Thread(target=produce, name="omni-tts-csm", daemon=True)
        worker.start()
        context = extras["context_frames"]
        context = self.default_context if context is None else context
        frames: list[Any] = []
        emitted = 0
        target = extras["first_chunk_frames"]
        finished = False
        try:
            while not finished:
                item = frames_q.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                # The stream ends at the first frame whose codebooks are all EOS (as in
                # transformers' generate(output_audio=True)).
                if bool((item == self.eos).all()):
                    finished = True
                    cancel.set()
                    break
                frames.append(item)
                if len(frames) - emitted >= target:
                    yield self._decode(frames, emitted, len(frames), context)
                    emitted = len(frames)
                    target = extras["chunk_frames"]
            if len(frames) > emitted:
                yield self._decode(frames, emitted, len(frames), context)
        finally:
            cancel.set()
            worker.join()
