"""AMD ROCm platform for omni (HIP, RCCL, aiter/CK attention)."""

__version__ = "0.3.0"
