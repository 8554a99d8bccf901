"""Turn a user's dtype (``"bf16"``, ``"bfloat16"``, ``torch.float16``) into a torch dtype."""

from __future__ import annotations

from typing import Any

from omni_core.contract.errors import ConfigError


def parse_dtype(dtype: Any, default: str) -> Any:
    """``dtype`` as a torch dtype (``default`` when None); a ConfigError names unknown ones."""
    import torch

    if dtype is None:
        dtype = default
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"dtype: unknown dtype {dtype!r} (use bfloat16, float16 or float32)")
    return value
