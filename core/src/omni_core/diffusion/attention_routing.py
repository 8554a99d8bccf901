"""Route the attention of a diffusers model through omni's dispatcher, per role.

Modern diffusers models compute attention in their processors' ``__call__`` by calling the
module-level name ``dispatch_attention_fn`` (q/k/v as ``[batch, seq, heads, head_dim]``, the
layout omni's backends take). :func:`route_attention` rebinds that one name, per processor, and
copies no diffusers code:

- each attention module's processor gets a thin subclass of its own class whose ``__call__`` is
  the *same code object* as the original, built with a globals mapping in which
  ``dispatch_attention_fn`` is omni's kernel for that module's role (``self`` / ``cross`` /
  ``joint``). Attributes and the ``__call__`` signature are unchanged, so diffusers' keyword
  filtering, ``set_attention_backend`` and ``fuse_projections`` keep working;
- inside that kernel, calls omni cannot serve as asked (dropout, ``is_causal``, GQA, extra
  ``attention_kwargs``, diffusers' own context parallelism) go to the original diffusers
  function unchanged.

No module global is patched and no per-call state is kept, so other models in the process are
untouched and ``torch.compile`` traces routed blocks without graph breaks (the routed
``__call__`` lives in a module object of its own, registered in ``sys.modules``, because dynamo
resolves a function's globals through its module). The kernel is bound when routing: to change
backends, route again.

Processors that do not call ``dispatch_attention_fn`` themselves (the older ``AttnProcessor2_0``
family calls ``F.scaled_dot_product_attention`` directly) are left alone and listed in
:attr:`RoutingReport.skipped`. :func:`unroute_attention` restores the original classes.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.attention import AttentionRouter, Role

#: Chooses the role of one attention module: ``(qualified_name, module) -> role``.
RoleFn = Callable[[str, Any], "Role"]

_NAME = "dispatch_attention_fn"
_ROUTED_CLASSES: dict[tuple[type, str, Any], type] = {}


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
    """Make ``model``'s attention calls run omni's kernels; idempotent, re-routable.

    The kernel per role comes from ``router``; with ``None``, from the router active now
    (:func:`omni_core.contract.attention.use_router`) or plain SDPA. It is bound at this call, not
    looked up per attention call (that keeps compiled graphs whole).
    """
    report = RoutingReport()
    for name, module in model.named_modules():
        processor = getattr(module, "processor", None)
        if processor is None or not callable(processor) or isinstance(processor, type):
            continue
        base = getattr(type(processor), "_omni_base_class", type(processor))
        if not _calls_dispatch(base):
            report.skipped.append(f"{name} ({base.__name__})")
            continue
        role = role_fn(name, module)
        processor.__class__ = _routed_class(base, role, _kernel(router, role))
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


def _calls_dispatch(base: type) -> bool:
    """Whether ``base.__call__`` itself (or a function nested in it) names the dispatcher."""
    call = getattr(base, "__call__", None)  # noqa: B004 - the class attribute, not callability
    code = getattr(call, "__code__", None)
    if code is None or _NAME not in call.__globals__:
        return False
    stack = [code]
    while stack:
        current = stack.pop()
        if _NAME in current.co_names:
            return True
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return False


def _kernel(router: AttentionRouter | None, role: Role) -> Callable[..., Any]:
    """The kernel of ``role``: from ``router``, else the router active now, else SDPA."""
    if router is None:
        from omni_core.contract.attention import active_router

        router = active_router()
    if router is not None:
        return router.functions[role]
    from omni_core.runtime.kernels.sdpa import sdpa

    return sdpa


def _routed_class(base: type, role: str, kernel: Callable[..., Any]) -> type:
    """A subclass of ``base`` whose ``__call__`` sees ``kernel`` as ``dispatch_attention_fn``."""
    key = (base, role, kernel)
    routed = _ROUTED_CLASSES.get(key)
    if routed is not None:
        return routed
    original = base.__call__
    # The routed __call__ runs the original code object against a *module* of its own: a copy
    # of the original module's namespace with the one name rebound, registered in sys.modules
    # under its own name (torch.compile resolves a function's globals through its module).
    source = original.__globals__
    module_name = f"omni_core._routed.{len(_ROUTED_CLASSES)}.{source.get('__name__', 'module')}"
    module = types.ModuleType(module_name)
    module.__dict__.update(source)
    module.__dict__["__name__"] = module_name
    module.__dict__[_NAME] = _make_dispatch(kernel, source[_NAME])
    sys.modules[module_name] = module
    call = types.FunctionType(
        original.__code__,
        module.__dict__,
        original.__name__,
        original.__defaults__,
        original.__closure__,
    )
    call.__kwdefaults__ = original.__kwdefaults__
    call.__qualname__ = original.__qualname__
    call.__doc__ = original.__doc__
    call.__annotations__ = dict(getattr(original, "__annotations__", {}))
    routed = type(
        f"OmniRouted{base.__name__}",
        (base,),
        {
            "__call__": call,
            "__module__": base.__module__,
            "_omni_base_class": base,
            "_omni_role": role,
            "_omni_kernel": staticmethod(kernel),
        },
    )
    _ROUTED_CLASSES[key] = routed
    return routed


def _make_dispatch(kernel: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
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
        if (
            dropout_p
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
        if attn_mask is not None and attn_mask.ndim == 2:
            # A [batch, keys] padding mask, as diffusers accepts it: broadcast over heads/queries.
            attn_mask = attn_mask[:, None, None, :]
        return kernel(query, key, value, attn_mask=attn_mask, scale=scale)

    dispatch_attention_fn.__wrapped__ = original  # type: ignore[attr-defined]
    return dispatch_attention_fn
