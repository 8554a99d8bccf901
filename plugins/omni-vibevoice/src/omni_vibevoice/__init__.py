"""The vibevoice speech pipeline for omni."""

__version__ = "0.2.0"
