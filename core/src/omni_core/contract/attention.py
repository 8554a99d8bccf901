"""The attention dispatcher: one interface, the backend chosen per platform and per role.

Every attention call in an omni pipeline goes through :func:`dispatch_attention` with q/k/v laid
out as ``[batch, seq, heads, head_dim]``. Which kernel runs is configuration
(:class:`~omni_core.contract.config.AttentionConfig`): globally, or per role (``self``, ``cross``,
``joint``), validated against the platform when the router is built, not in the hot loop.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from omni_core.contract.errors import ConfigError
from omni_core.contract.registry import AttentionBackendSpec, Availability, Registry, load_object

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.config import AttentionConfig
    from omni_core.contract.platforms import Platform

Role = Literal["self", "cross", "joint"]
ROLES: tuple[Role, ...] = ("self", "cross", "joint")
AttentionFn = Callable[..., "torch.Tensor"]
#: The backend :func:`dispatch_attention` uses outside :func:`use_router` (registered by the
#: built-in attention plugin, present on every platform).
DEFAULT_BACKEND = "sdpa"


def backend_availability(spec: AttentionBackendSpec, device_type: str) -> Availability:
    """Whether ``spec`` can run on ``device_type`` here, and why not."""
    if device_type not in spec.device_types:
        return Availability.no(f"runs on {', '.join(spec.device_types)}, not on {device_type}")
    if spec.availability is None:
        return Availability.yes()
    try:
        result = load_object(spec.availability)()
    except Exception as exc:  # noqa: BLE001
        return Availability.no(f"availability check failed: {type(exc).__name__}: {exc}")
    return result if isinstance(result, Availability) else Availability(available=bool(result))


def resolve_backend(
    name: str, registry: Registry, platform: Platform, *, field: str = "attention.backend"
) -> AttentionBackendSpec:
    """Turn a configured backend name (or ``auto``: the best usable lossless one) into a usable
    spec, or raise ConfigError.

    ``field`` is the setting the name came from (``attention.cross`` for a per-role override),
    so the error points at the value to fix.
    """
    backends = registry.attention_backends
    if name == "auto":  # lossless only: a lossy backend runs where it is named, never by chance
        exact = {n: s for n, s in backends.items() if not s.lossy}
        candidates = [exact[n] for n in platform.preferred_attention_backends if n in exact]
        candidates += sorted(
            (s for s in exact.values() if s not in candidates),
            key=lambda s: (-s.priority, s.name),
        )
        for spec in candidates:
            if backend_availability(spec, platform.device_type).available:
                return spec
        raise ConfigError(f"{field}: no attention backend is usable on platform {platform.name!r}")
    spec = backends.get(name)
    if spec is None:
        known = ", ".join(sorted(backends))
        raise ConfigError(f"{field}: unknown attention backend {name!r}; known: {known}")
    availability = backend_availability(spec, platform.device_type)
    if not availability.available:
        raise ConfigError(
            f"{field}: {name!r} cannot run on platform {platform.name!r}: {availability.reason}"
        )
    return spec


@dataclass(frozen=True)
class AttentionRouter:
    """Resolved kernels per role; built once per pipeline, consulted on every call."""

    functions: dict[str, AttentionFn]
    names: dict[str, str]

    @classmethod
    def build(
        cls, config: AttentionConfig, registry: Registry, platform: Platform
    ) -> AttentionRouter:
        functions: dict[str, AttentionFn] = {}
        names: dict[str, str] = {}
        overrides = {
            "self": config.self_attention,
            "cross": config.cross_attention,
            "joint": config.joint_attention,
        }
        for role in ROLES:
            field = f"attention.{role}" if overrides[role] else "attention.backend"
            spec = resolve_backend(config.for_role(role), registry, platform, field=field)
            functions[role] = spec.load()
            names[role] = spec.name
        return cls(functions=functions, names=names)

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        role: Role = "self",
        attn_mask: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        return self.functions[role](q, k, v, attn_mask=attn_mask, scale=scale)


_ACTIVE: contextvars.ContextVar[AttentionRouter | None] = contextvars.ContextVar(
    "omni_attention_router", default=None
)


@contextlib.contextmanager
def use_router(router: AttentionRouter) -> Iterator[AttentionRouter]:
    """Make ``router`` the one :func:`dispatch_attention` uses inside this block."""
    token = _ACTIVE.set(router)
    try:
        yield router
    finally:
        _ACTIVE.reset(token)


def active_router() -> AttentionRouter | None:
    """The router :func:`use_router` made active here, if any."""
    return _ACTIVE.get()


def dispatch_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    role: Role = "self",
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    **_: Any,
) -> torch.Tensor:
    """Attention over ``[B, S, H, D]`` tensors through the active router
    (:data:`DEFAULT_BACKEND` if none)."""
    router = _ACTIVE.get()
    if router is None:  # PyTorch's SDPA, as the built-in attention plugin registers it
        from omni_core.contract.host import get_registry

        kernel = get_registry().attention_backends[DEFAULT_BACKEND].load()
        return kernel(q, k, v, attn_mask=attn_mask, scale=scale)
    return router(q, k, v, role=role, attn_mask=attn_mask, scale=scale)
