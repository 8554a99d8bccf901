"""Qwen-Image-Edit and Qwen-Image-Edit-2509: the text-to-image pipeline plus input images.

Edits append the VAE latents of the input image(s) to the image sequence and describe them to
the text encoder inside the edit chat template (Edit-2509: "Picture i:" for each image, shown to
the encoder at 384x384 area); the system prefix dropped from the encoder output is 64 tokens.
"""

from __future__ import annotations

from typing import Any

from omni_qwen.layout import EDIT_AREA, calculate_dimensions
from omni_qwen.text_to_image import Condition, QwenImagePipeline

_EDIT_SYSTEM = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
    "texture, objects, background), then explain how the user's text instruction should alter "
    "or modify the image. Generate a new image that meets the user's requirements while "
    "maintaining consistency with the original input where appropriate.<|im_end|>\n"
    "<|im_start|>user\n"
)
_ASSISTANT = "<|im_end|>\n<|im_start|>assistant\n"
EDIT_TEMPLATE = _EDIT_SYSTEM + "<|vision_start|><|image_pad|><|vision_end|>{}" + _ASSISTANT
EDIT_PLUS_TEMPLATE = _EDIT_SYSTEM + "{}" + _ASSISTANT
_PICTURE = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>"
#: Edit-2509's text-encoder view of each input image.
_CONDITION_AREA = 384 * 384


class QwenImageEditPipeline(QwenImagePipeline):
    """Qwen-Image-Edit: one input image and an instruction (diffusers' QwenImageEditPipeline)."""

    image_range = (1, 1)
    template = EDIT_TEMPLATE
    drop_tokens = 64
    family = "qwen-image-edit"

    def _conditions(self, images: list[Any]) -> list[Condition]:
        (image,) = images
        width, height = calculate_dimensions(EDIT_AREA, image.width / image.height)
        resized = self.image_processor.resize(image, height, width)
        return [(resized, resized, (width, height))]


class QwenImageEditPlusPipeline(QwenImagePipeline):
    """Qwen-Image-Edit-2509: one to three input images (diffusers' QwenImageEditPlusPipeline)."""

    image_range = (1, 3)
    template = EDIT_PLUS_TEMPLATE
    drop_tokens = 64
    family = "qwen-image-edit-plus"

    def _conditions(self, images: list[Any]) -> list[Condition]:
        result = []
        for image in images:
            ratio = image.width / image.height
            cond_w, cond_h = calculate_dimensions(_CONDITION_AREA, ratio)
            vae_size = calculate_dimensions(EDIT_AREA, ratio)
            result.append((image, self.image_processor.resize(image, cond_h, cond_w), vae_size))
        return result

    def _prompt_text(self, prompt: str, count: int) -> str:
        pictures = "".join(_PICTURE.format(i + 1) for i in range(count))
        return self.template.format(pictures + prompt)
