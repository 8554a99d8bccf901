"""The compatibility row of omni-platform-rocm, as data (``omni doctor`` shows and checks it).

``COMPATIBILITY`` maps distribution names to PEP 440 specifiers (what ``omni doctor`` checks
against installed versions; a ROCm torch reports e.g. ``2.9.0+rocm6.4``). The ROCm runtime and
the GPUs are outside pip's view: ``SYSTEM_REQUIREMENTS`` states them and the platform's
``describe()`` shows them. Imports nothing heavy.
"""

from __future__ import annotations

COMPATIBILITY: dict[str, str] = {
    "omni-core": ">=0.3,<0.4",
    "torch": ">=2.5",
}

#: The oldest ROCm (``torch.version.hip``) this plugin is meant for: fp8 (fnuz) matmuls through
#: hipBLASLt and the aiter / CK flash kernels need ROCm 6.
MIN_ROCM = (6, 0)

SYSTEM_REQUIREMENTS: dict[str, str] = {
    "ROCm (torch.version.hip)": ">=6.0 (6.2+ recommended)",
    "hardware": "AMD Instinct MI200 (gfx90a), MI300 (gfx942), MI350 (gfx950); Radeon gfx11/gfx12",
    "optional": "aiter (AMD AI Tensor Engine), flash-attn ROCm build (Composable Kernel backend)",
    "tested": "contract tests with a stand-in HIP build on torch 2.13.0 (no AMD GPU in CI)",
}
