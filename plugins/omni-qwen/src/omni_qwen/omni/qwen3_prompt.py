"""Qwen3-Omni's prompt: a conversation (and its media) -> the thinker's inputs, through
transformers' ``Qwen3OmniMoeProcessor``.

:func:`load_processor` loads the checkpoint's processor with ``from_pretrained``. Where
torchvision is not installed, transformers cannot load its video processor, and with it the
whole processor, even for text; the same processor class is then built from the folder's
tokenizer, image processor, feature extractor and chat template, without a video processor
(video parts are then refused with a 400). :func:`encode` renders the chat template and runs
the processor, as the model card does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core import InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.chat import ChatMessage


def load_processor(folder: str | Path) -> tuple[Any, bool]:
    """(the processor of ``folder``, whether it reads videos)."""
    from transformers import Qwen3OmniMoeProcessor

    from .processors import load_processor as load

    return load(folder, Qwen3OmniMoeProcessor)


def encode(
    processor: Any, messages: list[ChatMessage], *, videos: bool, system_prompt: str | None = None
) -> dict[str, torch.Tensor]:
    """``messages`` -> the processor's tensors for one conversation: ``input_ids [1, T]`` and
    the media features (``pixel_values`` / ``image_grid_thw``, ``input_features`` /
    ``feature_attention_mask``, ``pixel_values_videos`` / ``video_grid_thw`` /
    ``video_second_per_grid``)."""
    import torch

    from omni_qwen.omni.messages import to_processor_inputs

    rate = int(processor.feature_extractor.sampling_rate)
    inputs = to_processor_inputs(messages, system_prompt=system_prompt, sampling_rate=rate)
    if inputs.videos and not videos:
        raise InvalidRequestError(
            "messages: this server cannot read video parts (transformers' video processor "
            "needs torchvision, which is not installed)",
            param="messages",
        )
    text = processor.apply_chat_template(
        inputs.conversation, add_generation_prompt=True, tokenize=False
    )
    batch = processor(text=text, **inputs.processor_kwargs(), return_tensors="pt")
    out = {k: v for k, v in batch.items() if k != "attention_mask" and v is not None}
    if "video_second_per_grid" in out:
        out["video_second_per_grid"] = torch.as_tensor(out["video_second_per_grid"])
    return out
