"""Speech pipelines for omni: transformers TTS models and Piper voices."""

__version__ = "0.3.0"
