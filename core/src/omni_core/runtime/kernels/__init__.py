"""Attention kernels the mechanism and the built-in plugins share (no plugin code here).

- :mod:`omni_core.runtime.kernels.sdpa`: PyTorch SDPA, pinned kernels and the shape-aware
``sdpa_auto``.
- :mod:`omni_core.runtime.kernels.external`: flash-attn, FA3 and SageAttention when installed.
"""
