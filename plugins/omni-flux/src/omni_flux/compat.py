"""Loading FLUX.2-dev's ``PixtralProcessor`` folder where transformers alone cannot.

transformers 5's Pixtral processor module imports torchvision (for its image processor), so on a
machine without it ``PixtralProcessor.from_pretrained`` fails although FLUX.2 text-to-image only
ever sends text through it: the processor renders its chat template and tokenizes the result.
Where that happens the folder's tokenizer, with the same chat template, does exactly that
(diffusers calls ``apply_chat_template`` on whichever it is given).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_mistral_processor(folder: str | Path) -> Any:
    """``PixtralProcessor`` from ``folder``; its tokenizer (chat template included) where
    transformers cannot build it without torchvision."""
    try:
        from transformers import PixtralProcessor

        return PixtralProcessor.from_pretrained(folder)
    except ImportError:  # transformers' Pixtral image processing needs torchvision
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        if not tokenizer.chat_template:
            raise
        return tokenizer
