"""omni on Ray Serve: ``omni deploy ray MODEL...`` (see README.md and the deployment page of
sdk-docs). Importing this package imports neither ray nor torch."""

__version__ = "0.2.0"
