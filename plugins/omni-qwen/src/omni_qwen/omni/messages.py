"""A chat request's messages -> what a Qwen-Omni processor takes (shared by Qwen2.5-Omni and
Qwen3-Omni).

The server hands a chat pipeline :class:`omni_core.chat.ChatMessage` objects whose parts hold
decoded
media. transformers' omni processors (``Qwen2_5OmniProcessor``, ``Qwen3OmniMoeProcessor``) take a
conversation for their chat template, whose content items are ``{"type": "text", "text": ...}``,
``{"type": "image"}``, ``{"type": "audio"}`` and ``{"type": "video"}``, and the media themselves
as lists in the order their placeholders appear. :func:`to_processor_inputs` makes both:

    inputs = to_processor_inputs(messages, system_prompt=DEFAULT, sampling_rate=16000)
    text = processor.apply_chat_template(inputs.conversation, add_generation_prompt=True,
                                         tokenize=False)
    batch = processor(text=text, **inputs.processor_kwargs(), return_tensors="pt")

Audio parts are resampled to ``sampling_rate`` (the processor's feature extractor rate); a
video's sound track is not used (the processor's ``load_audio_from_video`` reads files, not
decoded frames); a video's frame rate goes to the processor as ``fps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.chat import ChatMessage


@dataclass
class ProcessorInputs:
    """The conversation for the chat template plus its media, in placeholder order."""

    conversation: list[dict[str, Any]]
    images: list[Any] = field(default_factory=list)
    #: float32 mono PCM at the ``sampling_rate`` asked for.
    audios: list[np.ndarray] = field(default_factory=list)
    #: ``[frames, H, W, 3]`` uint8 arrays.
    videos: list[np.ndarray] = field(default_factory=list)
    video_fps: list[float] = field(default_factory=list)

    @property
    def has_media(self) -> bool:
        return bool(self.images or self.audios or self.videos)

    def processor_kwargs(self) -> dict[str, Any]:
        """``images`` / ``audio`` / ``videos`` (and the videos' ``fps``) for the processor call,
        only those present."""
        out: dict[str, Any] = {}
        if self.images:
            out["images"] = list(self.images)
        if self.audios:
            out["audio"] = list(self.audios)
        if self.videos:
            out["videos"] = list(self.videos)
            out["fps"] = self.video_fps[0] if len(set(self.video_fps)) == 1 else self.video_fps
        return out


def _audio(samples: Any, rate: int | None, target: int) -> np.ndarray:
    import numpy as np

    wav = np.asarray(samples, dtype=np.float32).reshape(-1)
    if rate is None or int(rate) == int(target):
        return wav
    from omni_core.speech import resample

    return resample(wav, int(rate), int(target))


def to_processor_inputs(
    messages: list[ChatMessage],
    *,
    system_prompt: str | None = None,
    sampling_rate: int = 16000,
) -> ProcessorInputs:
    """``messages`` -> the processor's conversation and media lists.

    ``system_prompt`` is put first when the conversation has no system message (the official
    Qwen-Omni checkpoints speak only under their own system prompt). Empty text parts are
    dropped; a message left without parts keeps one empty text item (the template needs one).
    """
    conversation: list[dict[str, Any]] = []
    out = ProcessorInputs(conversation=conversation)
    if system_prompt is not None and not any(m.role == "system" for m in messages):
        conversation.append(
            {"role": "system", "content": [{"type": "text", "text": system_prompt}]}
        )
    for message in messages:
        content: list[dict[str, Any]] = []
        for part in message.parts:
            if part.kind == "text":
                if part.text:
                    content.append({"type": "text", "text": part.text})
            elif part.kind == "image":
                content.append({"type": "image"})
                out.images.append(part.image)
            elif part.kind == "audio":
                content.append({"type": "audio"})
                out.audios.append(_audio(part.audio, part.sample_rate, sampling_rate))
            elif part.kind == "video":
                import numpy as np

                content.append({"type": "video"})
                out.videos.append(np.asarray(part.video))
                out.video_fps.append(float(part.fps or 2.0))
            else:  # pragma: no cover - ChatPart.kind is a closed set
                raise ValueError(f"unknown content part kind {part.kind!r}")
        if not content:
            content.append({"type": "text", "text": ""})
        conversation.append({"role": message.role, "content": content})
    return out
