"""The routes of the diffusion lane: images, videos, and image models answering chat."""
