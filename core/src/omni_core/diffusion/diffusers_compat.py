"""Small compatibility helpers for the diffusers versions omni supports (0.35 and newer)."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _new_dtype_keyword() -> bool:
    try:
        from diffusers.utils import deprecation_utils
    except ImportError:  # pragma: no cover - diffusers is a runtime dependency
        return False
    return hasattr(deprecation_utils, "_resolve_dtype")


def dtype_kwargs(dtype: Any) -> dict[str, Any]:
    """``from_pretrained`` keyword for a dtype: ``dtype`` on new diffusers, else ``torch_dtype``.

    diffusers renamed the argument (the old name warns); passing the right one keeps logs clean
    on every supported version.
    """
    return {"dtype": dtype} if _new_dtype_keyword() else {"torch_dtype": dtype}
