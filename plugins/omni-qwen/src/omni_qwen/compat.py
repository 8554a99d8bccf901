"""Loading Qwen2-VL's processor where transformers alone cannot.

transformers 5.x type-checks every processor part in ``ProcessorMixin.__init__``; on a machine
without torchvision the video-processor classes it checks against do not exist, so
``Qwen2VLProcessor.from_pretrained`` fails even though Qwen-Image's edits only ever pass images.
Where that happens we assemble the same transformers ``Qwen2VLProcessor`` from its image processor
(the PIL backend needs no torchvision) and tokenizer, without a video processor: the text and
image code path that the edit pipelines call is transformers' own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_vl_processor(folder: str | Path) -> Any:
    """``Qwen2VLProcessor`` from ``folder``, built without its video part if transformers cannot."""
    # AutoImageProcessor, not Qwen2VLImageProcessor by name: without torchvision that name
    # warns that it falls back to the PIL backend, which is what is wanted here.
    from transformers import AutoImageProcessor, Qwen2Tokenizer, Qwen2VLProcessor

    try:
        return Qwen2VLProcessor.from_pretrained(folder)
    except (AttributeError, TypeError, ImportError, ValueError, OSError):
        # AttributeError/TypeError: the processor type check without torchvision; any other
        # failure is re-raised below by the part loaders with their own clear message.
        pass
    image_processor = AutoImageProcessor.from_pretrained(folder)
    tokenizer = Qwen2Tokenizer.from_pretrained(folder)
    return assemble_vl_processor(image_processor, tokenizer)


def assemble_vl_processor(image_processor: Any, tokenizer: Any) -> Any:
    """A ``Qwen2VLProcessor`` with the attributes its ``__init__`` sets, minus the video part."""
    from transformers import Qwen2VLProcessor

    processor = Qwen2VLProcessor.__new__(Qwen2VLProcessor)
    processor.image_token = getattr(tokenizer, "image_token", "<|image_pad|>")
    processor.video_token = getattr(tokenizer, "video_token", "<|video_pad|>")
    processor.image_token_id = tokenizer.convert_tokens_to_ids(processor.image_token)
    processor.video_token_id = tokenizer.convert_tokens_to_ids(processor.video_token)
    processor.image_processor = image_processor
    processor.tokenizer = tokenizer
    processor.video_processor = None
    processor.chat_template = None
    return processor
