"""omni-hunyuan-video: HunyuanVideo-1.5 text- and image-to-video on omni's staged runtime."""

__version__ = "0.1.0"
