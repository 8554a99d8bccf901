"""The pocket-tts speech pipeline for omni."""

__version__ = "0.1.0"
