"""omni-stable-audio: Stable Audio Open (text to sound effects and music) on omni's staged
runtime."""

__version__ = "0.1.0"
