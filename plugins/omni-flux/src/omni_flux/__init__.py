"""FLUX.1, FLUX.1-Kontext and FLUX.2 pipelines for omni."""

__version__ = "0.1.0"
