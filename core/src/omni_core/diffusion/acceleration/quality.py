"""Quality of a lossy result against the lossless one: PSNR and SSIM (own implementations).

Both take images or videos as arrays/tensors with values in ``[0, data_range]`` and the channel
as the last axis (``H x W x C``, ``F x H x W x C`` or batched); uint8 arrays use ``data_range=255``.
SSIM is the Wang et al. (2004) index with an 11x11 Gaussian window (sigma 1.5), K1=0.01, K2=0.03,
computed per channel on 2-D frames and averaged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _as_float(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _range(x: Any, data_range: float | None) -> float:
    if data_range is not None:
        return float(data_range)
    dtype = getattr(x, "dtype", None)
    return 255.0 if dtype is not None and str(dtype) in ("uint8", "torch.uint8") else 1.0


def psnr(reference: Any, test: Any, data_range: float | None = None) -> float:
    """Peak signal-to-noise ratio in dB; ``inf`` for identical inputs."""
    rng = _range(reference, data_range)
    a, b = _as_float(reference), _as_float(test)
    if a.shape != b.shape:
        raise ValueError(f"psnr: shapes differ: {a.shape} vs {b.shape}")
    mse = float(np.mean((a - b) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(rng * rng / mse)


def _gaussian_kernel(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    ax = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(ax**2) / (2 * sigma**2))
    return g / g.sum()


def _filter2d(img: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Separable 'valid' filtering of the last two axes."""
    k = len(kernel)
    h, w = img.shape[-2:]
    out = np.zeros((*img.shape[:-2], h - k + 1, w), dtype=np.float64)
    for i, c in enumerate(kernel):
        out += c * img[..., i : i + h - k + 1, :]
    out2 = np.zeros((*img.shape[:-2], h - k + 1, w - k + 1), dtype=np.float64)
    for i, c in enumerate(kernel):
        out2 += c * out[..., :, i : i + w - k + 1]
    return out2


def ssim(reference: Any, test: Any, data_range: float | None = None) -> float:
    """Mean structural similarity over frames and channels (1.0 for identical inputs)."""
    rng = _range(reference, data_range)
    a, b = _as_float(reference), _as_float(test)
    if a.shape != b.shape:
        raise ValueError(f"ssim: shapes differ: {a.shape} vs {b.shape}")
    if a.ndim == 2:
        a, b = a[..., None], b[..., None]
    # [..., H, W, C] -> [N, H, W] planes
    a = np.moveaxis(a, -1, -3).reshape(-1, *a.shape[-3:-1])
    b = np.moveaxis(b, -1, -3).reshape(-1, *b.shape[-3:-1])
    size = min(11, a.shape[-1], a.shape[-2])
    if size % 2 == 0:
        size -= 1
    kernel = _gaussian_kernel(size, 1.5 * size / 11)
    c1, c2 = (0.01 * rng) ** 2, (0.03 * rng) ** 2
    mu_a, mu_b = _filter2d(a, kernel), _filter2d(b, kernel)
    saa = _filter2d(a * a, kernel) - mu_a**2
    sbb = _filter2d(b * b, kernel) - mu_b**2
    sab = _filter2d(a * b, kernel) - mu_a * mu_b
    num = (2 * mu_a * mu_b + c1) * (2 * sab + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (saa + sbb + c2)
    return float(np.mean(num / den))
