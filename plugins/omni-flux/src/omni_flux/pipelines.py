"""FLUX.1 (dev, schnell), FLUX.1-Kontext and FLUX.2 (dev, klein) on omni's staged runtime.

diffusers' ``FluxPipeline``, ``FluxKontextPipeline``, ``Flux2Pipeline`` and
``Flux2KleinPipeline`` are the references: the models, VAE,
scheduler and tokenizers are theirs (and transformers'), loaded from the same checkpoint folder;
this package is the orchestration around them, rewritten for the staged protocol so that
requests of one size share each transformer forward and true CFG runs both branches as one
batch. The same seed gives the same pixels as the reference.

This module is what :mod:`omni_flux.plugin` names; the code is cut by job:
:mod:`omni_flux.staged` (the stages they share), :mod:`omni_flux.text_to_image` (FLUX.1),
:mod:`omni_flux.kontext` (its edit variant), :mod:`omni_flux.flux2` (FLUX.2),
:mod:`omni_flux.layout` (checkpoint layout and request checks), :mod:`omni_flux.loading`,
:mod:`omni_flux.prompts` (the encoders and their cache), :mod:`omni_flux.latents` and
:mod:`omni_flux.denoiser` (what acceleration and parallelism know about the transformers).
"""

from __future__ import annotations

from omni_flux.flux2 import Flux2ImagePipeline, Flux2KleinImagePipeline
from omni_flux.kontext import FluxKontextPipeline
from omni_flux.layout import FluxLayout
from omni_flux.staged import FluxState
from omni_flux.text_to_image import FluxImagePipeline

__all__ = [
    "Flux2ImagePipeline",
    "Flux2KleinImagePipeline",
    "FluxImagePipeline",
    "FluxKontextPipeline",
    "FluxLayout",
    "FluxState",
]
