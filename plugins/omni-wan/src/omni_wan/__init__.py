"""Wan 2.1 / 2.2 text- and image-to-video pipelines for omni."""

__version__ = "0.3.0"
