"""Qwen-Image, Qwen-Image-Edit and Qwen-Image-Edit-2509 on omni's staged runtime.

diffusers' ``QwenImagePipeline``, ``QwenImageEditPipeline`` and ``QwenImageEditPlusPipeline`` are
the references: the models, VAE, scheduler, tokenizer and processor are theirs (and
transformers'), loaded from the same checkpoint folder; this module is the orchestration around
them, rewritten for the staged protocol so that requests of one size share each transformer
forward and classifier-free guidance runs the conditional and unconditional branches as one
batch. The maths is the reference's, operation for operation, so the same seed gives the same
pixels:

* the prompt goes through Qwen2.5-VL inside Qwen-Image's chat template; the system prefix
  (34 tokens for text-to-image, 64 for edits) is dropped from the last hidden state;
* noise is drawn as ``[n, 1, C, H/8, W/8]`` from ``torch.Generator("cpu").manual_seed(seed)``
  and packed into 2x2 patches; the sigmas are ``linspace(1, 1/steps)`` shifted with the
  resolution-dependent ``mu`` by the checkpoint's FlowMatchEulerDiscreteScheduler;
* true CFG: ``neg + s * (cond - neg)`` rescaled to the conditional prediction's norm;
* edits append the VAE latents of the input image(s) to the image sequence and describe them to
  the text encoder (Edit-2509: "Picture i:" for each image, at 384x384 area).

Prompt embeddings and input-image latents are kept in small LRU caches, so repeating a prompt
(or editing the same image again) skips the encoder; the hit rate is in ``result.timings``.

This module is the plugin's entry point (``omni_qwen.plugin`` names these classes); the code is
cut by job: :mod:`omni_qwen.text_to_image` (the base pipeline), :mod:`omni_qwen.edit` (the edit
variants), :mod:`omni_qwen.layout` (checkpoint layout and request checks),
:mod:`omni_qwen.loading`, :mod:`omni_qwen.caches`, :mod:`omni_qwen.latents` and
:mod:`omni_qwen.denoiser` (what acceleration and parallelism know about the transformer).
"""

from __future__ import annotations

from omni_qwen.edit import (
    EDIT_PLUS_TEMPLATE,
    EDIT_TEMPLATE,
    QwenImageEditPipeline,
    QwenImageEditPlusPipeline,
)
from omni_qwen.layout import QwenLayout
from omni_qwen.text_to_image import T2I_TEMPLATE, QwenImagePipeline, QwenState

__all__ = [
    "EDIT_PLUS_TEMPLATE",
    "EDIT_TEMPLATE",
    "T2I_TEMPLATE",
    "QwenImageEditPipeline",
    "QwenImageEditPlusPipeline",
    "QwenImagePipeline",
    "QwenLayout",
    "QwenState",
]
