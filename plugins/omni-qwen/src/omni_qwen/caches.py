"""The key of the Qwen-Image pipelines' input-image latent cache (the caches themselves are
omni-core's ``LRUCache``): editing the same image again skips the VAE encoder."""

from __future__ import annotations

import hashlib
from typing import Any


def image_digest(image: Any) -> str:
    digest = hashlib.blake2b(image.tobytes(), digest_size=16)
    digest.update(f"{image.mode}{image.size}".encode())
    return digest.hexdigest()
