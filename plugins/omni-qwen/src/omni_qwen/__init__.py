"""Qwen-Image text-to-image and Qwen-Image-Edit pipelines for omni."""

__version__ = "0.3.0"
