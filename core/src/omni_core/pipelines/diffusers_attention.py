"""Route the attention of a diffusers model through omni's dispatcher, per role.

Modern diffusers models compute attention in their processors by calling the module-level
name ``dispatch_attention_fn`` (q/k/v as ``[batch, seq, heads, head_dim]``, the layout omni's
backends take). :func:`route_attention` does two small things and copies no diffusers code:

1. each attention module's processor is given a thin subclass of its own class (same
   attributes, same ``__call__`` signature, so diffusers' kwarg filtering keeps working) that
   marks, for the duration of the call, which omni role (``self``/``cross``/``joint``) and which
   kernel the call belongs to;
2. the ``dispatch_attention_fn`` global of the processor's module is replaced once by a shim:
   inside a marked call it runs omni's kernel; anywhere else (another model in the process, a
   call with dropout, a causal mask, GQA or diffusers' context parallelism) it calls the original
   function unchanged.

Processors that call ``torch.nn.functional.scaled_dot_product_attention`` directly (the older
``AttnProcessor2_0`` family) cannot be rerouted without patching torch globally; they are left
alone and listed in :attr:`RoutingReport.skipped`.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.attention import AttentionRouter, Role

#: Chooses the role of one attention module: ``(qualified_name, module) -> role``.
RoleFn = Callable[[str, Any], "Role"]

_ACTIVE: contextvars.ContextVar[tuple[Callable[..., Any], str] | None] = contextvars.ContextVar(
    "omni_diffusers_attention", default=None
)
_SHIM_FLAG = "__omni_routed__"
_ROUTED_CLASSES: dict[type, type] = {}


@dataclass
class RoutingReport:
    """What :func:`route_attention` did: processors routed per role, and modules left alone."""

    routed: dict[str, int] = field(default_factory=lambda: {"self": 0, "cross": 0, "joint": 0})
    skipped: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.routed.values())


def default_role(name: str, module: Any) -> Role:
    """Cross if the module attends to another sequence; joint if it mixes in added k/v; else self.

    Wan's ``attn2`` (text, plus image tokens for I2V) is cross; Qwen-Image / Flux double-stream
    blocks (``added_kv_proj_dim``) are joint.
    """
    if getattr(module, "is_cross_attention", False):
        return "cross"
    if getattr(module, "added_kv_proj_dim", None) is not None:
        return "joint"
    return "self"


def route_attention(
    model: torch.nn.Module,
    router: AttentionRouter | None = None,
    *,
    role_fn: RoleFn = default_role,
) -> RoutingReport:
    """Make ``model``'s attention calls run omni's kernels; idempotent.

    ``router`` fixes the kernel per role now; with ``None`` each call asks
    :func:`omni_core.attention.dispatch_attention`, i.e. the router active at call time
    (``use_router``) or plain SDPA.
    """
    report = RoutingReport()
    for name, module in model.named_modules():
        processor = getattr(module, "processor", None)
        if processor is None or not callable(processor) or isinstance(processor, type):
            continue
        role = role_fn(name, module)
        base = getattr(processor, "_omni_base_class", type(processor))
        if not _patch_module(base.__module__):
            report.skipped.append(f"{name} ({base.__name__})")
            continue
        if type(processor) is base:
            processor.__class__ = _routed_class(base)
        processor._omni_role = role
        processor._omni_kernel = _kernel(router, role)
        report.routed[role] += 1
    return report


def unroute_attention(model: torch.nn.Module) -> int:
    """Give every routed processor its original class back; returns how many."""
    count = 0
    for module in model.modules():
        processor = getattr(module, "processor", None)
        base = getattr(type(processor), "_omni_base_class", None)
        if base is not None:
            processor.__class__ = base
            count += 1
    return count


def _kernel(router: AttentionRouter | None, role: Role) -> Callable[..., Any]:
    if router is not None:
        return router.functions[role]
    from omni_core.attention import dispatch_attention

    def dynamic(q: Any, k: Any, v: Any, *, attn_mask: Any = None, scale: Any = None) -> Any:
        return dispatch_attention(q, k, v, role=role, attn_mask=attn_mask, scale=scale)

    return dynamic


def _routed_class(base: type) -> type:
    """A subclass of ``base`` whose calls are marked with the processor's role and kernel."""
    routed = _ROUTED_CLASSES.get(base)
    if routed is not None:
        return routed
    original_call = base.__call__

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _ACTIVE.set((self._omni_kernel, self._omni_role))
        try:
            return original_call(self, *args, **kwargs)
        finally:
            _ACTIVE.reset(token)

    # diffusers filters processor kwargs by inspecting __call__: keep the original signature.
    __call__.__signature__ = inspect.signature(original_call)  # type: ignore[attr-defined]
    __call__.__doc__ = original_call.__doc__
    routed = type(
        f"OmniRouted{base.__name__}",
        (base,),
        {"__call__": __call__, "_omni_base_class": base, "__module__": base.__module__},
    )
    _ROUTED_CLASSES[base] = routed
    return routed


def _patch_module(module_name: str) -> bool:
    """Swap ``dispatch_attention_fn`` in ``module_name`` for the shim; False if it has none."""
    module = sys.modules.get(module_name)
    original = getattr(module, "dispatch_attention_fn", None) if module is not None else None
    if original is None:
        return False
    if getattr(original, _SHIM_FLAG, False):
        return True
    module.dispatch_attention_fn = _make_shim(original)  # type: ignore[union-attr]
    return True


def _make_shim(original: Callable[..., Any]) -> Callable[..., Any]:
    def dispatch_attention_fn(
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
        attention_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        active = _ACTIVE.get()
        if (
            active is None
            or dropout_p
            or is_causal
            or enable_gqa
            or attention_kwargs
            or kwargs.get("parallel_config") is not None
        ):
            return original(
                query,
                key,
                value,
                attn_mask,
                dropout_p,
                is_causal,
                scale,
                enable_gqa,
                attention_kwargs,
                **kwargs,
            )
        kernel, _role = active
        if attn_mask is not None and attn_mask.ndim == 2:
            # A [batch, keys] padding mask, as diffusers accepts it: broadcast over heads/queries.
            attn_mask = attn_mask[:, None, None, :]
        return kernel(query, key, value, attn_mask=attn_mask, scale=scale)

    setattr(dispatch_attention_fn, _SHIM_FLAG, True)
    dispatch_attention_fn.__wrapped__ = original  # type: ignore[attr-defined]
    return dispatch_attention_fn
