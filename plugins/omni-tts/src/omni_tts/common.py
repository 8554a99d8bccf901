"""Shared pieces of the transformers speech pipelines: loading, seeding, voices, segmenting."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from omni_core import GenerationRequest, ModelNotFoundError, PipelineOptions
from omni_core.runtime import resolve_model_path
from omni_core.speech import StreamingSpeechPipeline, split_sentences

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: The voice id of a single-voice model.
DEFAULT_VOICE = "default"


class SegmentExtras(BaseModel):
    """Extras shared by the sentence-streaming pipelines."""

    model_config = ConfigDict(extra="forbid")

    split_sentences: bool = Field(
        True,
        description="Synthesise sentence by sentence (first audio after the first sentence). "
        "False runs the whole text in one forward, exactly as transformers does.",
    )


def request_seed(request: GenerationRequest) -> int:
    """The request's seed, or a fresh random one (so unseeded requests still differ)."""
    return request.seed if request.seed is not None else secrets.randbits(62)


def segments(request: GenerationRequest, enabled: bool) -> list[str]:
    """The text pieces to synthesise in order (the whole text when splitting is off)."""
    if not enabled:
        return [request.prompt]
    return split_sentences(request.prompt) or [request.prompt]


class TransformersSpeechPipeline(StreamingSpeechPipeline):
    """Base of the transformers-backed pipelines: device/dtype and seeded model calls.

    transformers' TTS models draw their noise (VITS flows, SpeechT5's prenet dropout, CSM's
    sampling) from torch's process-global RNG. To reproduce transformers for a seed and keep
    concurrent requests apart, each seeded call runs under :attr:`lock` inside
    ``torch.random.fork_rng``: segment ``i`` of a request is seeded with ``seed + i``, and the
    global RNG state of the process is left as it was.
    """

    def __init__(self, options: PipelineOptions) -> None:
        super().__init__()
        self.options = options
        self.device = options.device
        self.dtype = options.dtype

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        import torch

        devices = [self.device] if self.device.type == "cuda" else []
        with self.lock, torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(seed)
            yield

    def to_numpy(self, audio: torch.Tensor) -> Any:
        """A float32 mono numpy copy (the one host transfer per emitted chunk)."""
        import numpy as np

        return np.ascontiguousarray(audio.detach().float().reshape(-1).cpu().numpy())


def load_pretrained(cls: Any, path: Path | str, options: PipelineOptions, **kwargs: Any) -> Any:
    """``cls.from_pretrained`` on the pipeline's device and dtype, eval mode, safetensors only."""
    model = cls.from_pretrained(path, dtype=options.dtype, use_safetensors=True, **kwargs)
    return model.to(options.device).eval()


def find_vocoder(path: Path, options: PipelineOptions, default_hub_id: str) -> Path:
    """The HiFi-GAN vocoder of a checkpoint: ``<path>/vocoder``, an option, or the Hub default.

    ``options.extra["vocoder"]`` (a folder or Hub id) wins; otherwise a ``vocoder/`` subfolder;
    otherwise ``default_hub_id`` through huggingface-hub (offline: from its cache).
    """
    chosen = options.extra.get("vocoder")
    if chosen:
        return resolve_model_path(chosen)
    local = path / "vocoder"
    if (local / "config.json").is_file():
        return local
    try:
        return resolve_model_path(default_hub_id)
    except ModelNotFoundError as exc:
        raise ModelNotFoundError(
            f"{path} has no vocoder/ folder and the default vocoder {default_hub_id!r} could "
            f"not be loaded ({exc}); pass vocoder=PATH"
        ) from exc
