"""LoRA adapters of a pipeline's denoisers, through diffusers' own PEFT integration.

A pipeline builds one :class:`AdapterSet` in ``from_pretrained`` with the denoisers that take
adapters (every expert of a two-expert model) and a ``read`` function that turns a safetensors
file into a diffusers-format state dict (the model's own diffusers ``lora_state_dict``, which
converts the community formats)::

    self.adapters = AdapterSet.load({"transformer": t, "transformer_2": t2}, options, read=read)

and, at the top of ``step``, ``self.adapters.activate(states[0].request.lora)``. The engine
never puts requests with different adapters or scales in one step (the request's
:meth:`~omni_core.contract.types.GenerationRequest.lora_key` is part of the step key), so
one ``set_adapters`` per step is exact.

What this does with diffusers' parts:

* ``options.lora.fuse`` names the adapter merged into the weights at load (a step distill):
  ``load_lora_adapter`` -> ``set_adapters`` -> ``fuse_lora`` -> ``unload_lora``, so the
  denoiser is plain again (fused QKV, quantization and compile work as without LoRA). Its
  recommended steps / guidance (``options.lora.steps`` / ``guidance_scale``, else the file's
  ``omni.num_inference_steps`` / ``omni.guidance_scale`` metadata) become request defaults.
* every other adapter is read once into host memory and kept loaded in the denoisers
  (``load_lora_adapter``) while it is among the ``max_active`` most recently used and their
  device bytes fit ``max_memory_mb``; a least recently used one is unloaded
  (``delete_adapters``) and loaded again from host memory when a request asks for it.
* ``activate`` calls ``set_adapters(names, weights)`` (or ``disable_lora`` for a request
  without adapters) only when the set changes; the switch count and time are reported.
"""

from __future__ import annotations

import collections
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError, InvalidRequestError
from omni_core.contract.pipeline import Adapters
from omni_core.diffusion.acceleration.lora_files import (
    METADATA_DEFAULTS,
    file_defaults,
    fused_defaults,
    read_safetensors_lora,
    resolve_lora_file,
)

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.pipeline import PipelineOptions
    from omni_core.contract.types import GenerationRequest, LoraRef

#: Reads one safetensors LoRA file: ``path -> (diffusers-format state dict, metadata or None)``.
ReadFn = Callable[[Path], tuple[dict[str, Any], Any]]


@dataclass
class Adapter:
    """One adapter held in host memory: its state dict per denoiser and its default scale."""

    name: str
    source: str
    scale: float
    parts: dict[str, dict[str, Any]]
    metadata: Any = None
    nbytes: int = 0

    def describe(self, loaded: bool) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "scale": self.scale,
            "components": sorted(self.parts),
            "bytes": self.nbytes,
            "loaded": loaded,
        }


@dataclass
class AdapterSet(Adapters):
    """The adapters of one pipeline; see the module docstring."""

    modules: dict[str, Any]
    adapters: dict[str, Adapter] = field(default_factory=dict)
    fused: dict[str, Any] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    max_active: int = 8
    max_bytes: int | None = None
    #: False under block offload: every adapter stays loaded (they stream with their blocks).
    evictable: bool = True
    loaded: collections.OrderedDict[str, None] = field(default_factory=collections.OrderedDict)
    active: tuple[tuple[str, float], ...] | None = None
    stats: dict[str, float] = field(
        default_factory=lambda: {"switches": 0, "switch_s": 0.0, "loads": 0, "evictions": 0}
    )

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        modules: Mapping[str, Any],
        options: PipelineOptions,
        *,
        read: ReadFn = read_safetensors_lora,
    ) -> AdapterSet | None:
        """Read ``options.lora``'s adapters, fuse the one named ``fuse``, preload the others.

        None when no adapter is configured. Raises ConfigError naming the adapter for a
        missing file, a state dict that matches no denoiser, or a bad ``fuse`` name.
        """
        config = options.lora
        if not config.adapters:
            return None
        import importlib.util

        if importlib.util.find_spec("peft") is None:
            raise ConfigError("lora: LoRA adapters need the peft package (pip install peft)")
        modules = {k: v for k, v in modules.items() if v is not None}
        names = [a.name for a in config.adapters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"lora: adapter names must be unique, repeated: {', '.join(twice)}")
        if config.fuse is not None and config.fuse not in names:
            raise ConfigError(
                f"fuse_lora: {config.fuse!r} is not a loaded adapter (loaded: {', '.join(names)})"
            )
        self = cls(
            modules=dict(modules),
            max_active=config.max_active,
            max_bytes=int(config.max_memory_mb * 2**20) if config.max_memory_mb else None,
            evictable=options.memory.offload != "block",
        )
        for entry in config.adapters:
            file = resolve_lora_file(entry.path)
            adapter = self._read(entry.name, entry.path, entry.scale, file, read)
            if entry.name == config.fuse:
                self._fuse(adapter)
                defaults = file_defaults(file)
                if config.steps is not None:
                    defaults["num_inference_steps"] = config.steps
                if config.guidance_scale is not None:
                    defaults["guidance_scale"] = config.guidance_scale
                self.defaults = defaults
                self.fused = {**adapter.describe(True), "defaults": dict(defaults)}
            else:
                self.adapters[entry.name] = adapter
        for name in list(self.adapters)[: None if not self.evictable else self.max_active]:
            if self._fits(self.adapters[name].nbytes) or not self.evictable:
                self._load(name)
        return self

    def _read(self, name: str, source: str, scale: float, file: Path, read: ReadFn) -> Adapter:
        state_dict, metadata = read(file)
        parts: dict[str, dict[str, Any]] = {}
        for component in self.modules:
            # A key prefixed with the component's own name (``transformer_2.``) is for it
            # alone; otherwise every denoiser takes the ``transformer.`` keys (one LoRA file
            # for both experts, as diffusers' load_into_transformer_2 does).
            prefix = component if any(k.startswith(f"{component}.") for k in state_dict) else None
            prefix = prefix or "transformer"
            part = {k: v for k, v in state_dict.items() if k.startswith(f"{prefix}.")}
            if part:
                parts[component] = part
        if not parts:
            sample = ", ".join(list(state_dict)[:3])
            raise ConfigError(
                f"lora {name!r}: {file} holds no LoRA weights for {', '.join(self.modules)} "
                f"(keys start: {sample})"
            )
        nbytes = sum(t.numel() * t.element_size() for p in parts.values() for t in p.values())
        return Adapter(name, source, scale, parts, metadata, nbytes)

    def _meta(self, adapter: Adapter, component: str) -> Any:
        meta = adapter.metadata
        if not isinstance(meta, Mapping) or not meta:
            return None
        prefix = next(iter(adapter.parts[component])).split(".", 1)[0]
        if any(k.startswith(f"{prefix}.") for k in meta):
            return {k: v for k, v in meta.items() if k.startswith(f"{prefix}.")}
        return {f"{prefix}.{k}": v for k, v in meta.items()}

    def _load_into(self, adapter: Adapter, component: str) -> None:
        part = adapter.parts[component]
        prefix = next(iter(part)).split(".", 1)[0]
        with warnings.catch_warnings():  # PEFT warns on every adapter after the first
            warnings.filterwarnings("ignore", message="Already found a `peft_config`")
            self.modules[component].load_lora_adapter(
                dict(part),
                prefix=prefix,
                adapter_name=adapter.name,
                metadata=self._meta(adapter, component),
            )

    def _fuse(self, adapter: Adapter) -> None:
        for component in adapter.parts:
            module = self.modules[component]
            self._load_into(adapter, component)
            module.set_adapters([adapter.name], [adapter.scale])
            module.fuse_lora(adapter_names=[adapter.name])
            module.unload_lora()  # merged weights stay; the PEFT layers go

    # -- the LRU -------------------------------------------------------------------------------

    def _loaded_bytes(self) -> int:
        return sum(self.adapters[n].nbytes for n in self.loaded)

    def _fits(self, nbytes: int) -> bool:
        return self.max_bytes is None or self._loaded_bytes() + nbytes <= self.max_bytes

    def _load(self, name: str) -> None:
        adapter = self.adapters[name]
        for component in adapter.parts:
            self._load_into(adapter, component)
        self.loaded[name] = None
        self.stats["loads"] += 1
        self.active = None  # the PEFT layers changed: set the adapters again

    def _evict(self, name: str) -> None:
        for component in self.adapters[name].parts:
            self.modules[component].delete_adapters([name])
        del self.loaded[name]
        self.stats["evictions"] += 1
        self.active = None

    def _make_room(self, keep: list[str], count: int, nbytes: int) -> None:
        """Unload least recently used adapters (never one of ``keep``) until ``count`` more
        adapters of ``nbytes`` fit ``max_active`` and ``max_memory_mb``."""
        if not self.evictable:
            return
        for victim in list(self.loaded):
            if len(self.loaded) + count <= self.max_active and self._fits(nbytes):
                return
            if victim not in keep:
                self._evict(victim)

    def _ensure(self, names: list[str]) -> None:
        for name in names:
            if name in self.loaded:
                self.loaded.move_to_end(name)
            else:
                self._make_room(names, 1, self.adapters[name].nbytes)
                self._load(name)
        self._make_room(names, 0, 0)  # the caps may have shrunk

    # -- per request ---------------------------------------------------------------------------

    def resolve(self, refs: Iterable[LoraRef]) -> tuple[LoraRef, ...]:
        """``refs`` with every scale filled in; InvalidRequestError naming unknown adapters."""
        refs = tuple(refs)
        names = [r.name for r in refs]
        unknown = [n for n in names if n not in self.adapters]
        if unknown:
            known = ", ".join(sorted(self.adapters)) or "none"
            hint = ""
            if self.fused is not None and self.fused["name"] in unknown:
                hint = f" ({self.fused['name']!r} is fused into the weights: it is always on)"
            raise InvalidRequestError(
                f"lora: unknown adapter{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))}{hint}; loaded: {known}",
                param="lora",
            )
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidRequestError(
                f"lora: {', '.join(map(repr, twice))} named twice", param="lora"
            )
        if self.evictable and len(names) > self.max_active:
            raise InvalidRequestError(
                f"lora: {len(names)} adapters at once, this server keeps at most "
                f"{self.max_active} active",
                param="lora",
            )
        scales = {n: {"scale": a.scale} for n, a in self.adapters.items()}
        return tuple(r.model_copy(update=scales[r.name]) if r.scale is None else r for r in refs)

    def activate(self, refs: Iterable[LoraRef]) -> None:
        """Make ``refs`` (resolved) the adapters of the next denoiser calls."""
        key = tuple((r.name, float(r.scale or 0.0)) for r in self.resolve(refs))
        if key == self.active:
            return
        t0 = time.perf_counter()
        self._ensure([name for name, _ in key])
        for component, module in self.modules.items():
            mine = [(n, s) for n, s in key if component in self.adapters[n].parts]
            if not self.loaded:
                continue  # no PEFT layers in the module at all
            if mine:
                module.enable_lora()
                module.set_adapters([n for n, _ in mine], [s for _, s in mine])
            else:
                module.disable_lora()
        self.active = key
        self.stats["switches"] += 1
        self.stats["switch_s"] += time.perf_counter() - t0

    def request_defaults(self) -> dict[str, Any]:
        """The shared fields the fused distill recommends (filled in where a request has none)."""
        return dict(self.defaults)

    def check_request(self, request: GenerationRequest) -> GenerationRequest:
        """``request`` with its adapters resolved (scales filled in); 400 for unknown ones."""
        if not request.lora:
            return request
        return request.model_copy(update={"lora": self.resolve(request.lora)})

    def describe(self) -> dict[str, Any]:
        """What ``/v1/models`` lists: the selectable adapters, the fused one, the LRU state."""
        return {
            "adapters": [a.describe(a.name in self.loaded) for a in self.adapters.values()],
            "fused": self.fused,
            "max_active": self.max_active,
            "max_memory_bytes": self.max_bytes,
            "stats": dict(self.stats),
        }


__all__ = [
    "METADATA_DEFAULTS",
    "Adapter",
    "AdapterSet",
    "file_defaults",
    "fused_defaults",
    "read_safetensors_lora",
    "resolve_lora_file",
]
