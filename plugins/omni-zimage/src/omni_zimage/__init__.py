"""omni-zimage: Z-Image (Z-Image-Turbo, Z-Image) text-to-image on omni's staged runtime."""

__version__ = "0.1.0"
