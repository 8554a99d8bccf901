"""omni-ltx: LTX-2 text- and image-to-video with its audio track on omni's staged runtime."""

__version__ = "0.2.0"
