"""``omni serve`` / ``omni generate`` flags for LoRA adapters, offload and VAE tiling.

:func:`memory_options` adds the flags and turns them into two ``Omni(...)`` keywords, checked
before any weights load (a bad spec or a missing file is one line and exit code 2):

* ``lora``: a :class:`~omni_core.contract.config.LoraConfig` dict (``--lora NAME=PATH[:SCALE]``
  repeatable, ``--fuse-lora NAME``, ``--lora-steps``, ``--lora-guidance``,
  ``--lora-max-active``, ``--lora-max-memory``);
* ``offload``: a :class:`~omni_core.contract.config.MemoryConfig` dict (``--offload``,
  ``--max-gpu-memory``, ``--offload-blocks``, ``--vae-tiling``, ``--vae-slicing``,
  ``--vae-tile``).

``omni serve`` receives them as ``--option lora=...`` / ``--option offload=...`` entries
(``into="load_options"``), so the server config carries them like any loading option;
``omni generate`` receives the dict as ``memory_kwargs``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import click

_FLAGS = (
    "lora_specs",
    "fuse_lora",
    "lora_steps",
    "lora_guidance",
    "lora_max_active",
    "lora_max_memory",
    "offload",
    "max_gpu_memory",
    "offload_blocks",
    "vae_tiling",
    "vae_slicing",
    "vae_tile",
)


def memory_options(func: Any = None, *, into: str = "memory_kwargs") -> Any:
    """Add the flags to a click command; see the module docstring for what it receives."""
    if func is None:
        return functools.partial(memory_options, into=into)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _FLAGS}
        omni_kwargs = memory_kwargs(**values)
        if into == "load_options":
            given = tuple(kwargs.get(into) or ())
            taken = {item.partition("=")[0].strip() for item in given}
            for key, value in omni_kwargs.items():
                if key in taken:
                    raise click.BadParameter(
                        f"{key} is set twice: by --option {key}=... and by its own flags",
                        param_hint="--option",
                    )
                given += (f"{key}={json.dumps(value)}",)
            kwargs[into] = given
        else:
            kwargs[into] = omni_kwargs
        return func(*args, **kwargs)

    options = [
        click.option(
            "--lora",
            "lora_specs",
            multiple=True,
            metavar="NAME=PATH[:SCALE]",
            help="Preload a LoRA adapter (safetensors file or folder, or a Hub id); requests "
            "select it by NAME (repeatable). `omni generate` applies every one.",
        ),
        click.option("--fuse-lora", metavar="NAME", help="Merge this --lora into the weights."),
        click.option(
            "--lora-steps",
            type=click.IntRange(1, 1000),
            help="Default steps with the fused adapter (else its omni.num_inference_steps).",
        ),
        click.option(
            "--lora-guidance",
            type=click.FloatRange(0, 100),
            help="Default guidance with the fused adapter (else its omni.guidance_scale).",
        ),
        click.option(
            "--lora-max-active",
            type=click.IntRange(1, 1024),
            help="Adapters kept loaded at once (LRU; default 8).",
        ),
        click.option(
            "--lora-max-memory",
            type=click.FloatRange(min=0, min_open=True),
            metavar="MIB",
            help="Device memory the loaded adapters may take (LRU).",
        ),
        click.option(
            "--offload",
            type=click.Choice(["none", "model", "block", "auto"]),
            help="model: one component on the device at a time; block: the denoiser's blocks "
            "streamed with prefetch; auto (default): picked from --max-gpu-memory.",
        ),
        click.option(
            "--max-gpu-memory",
            type=click.FloatRange(min=0, min_open=True),
            metavar="GIB",
            help="Device memory the model may use; picks the offload mode.",
        ),
        click.option(
            "--offload-blocks",
            type=click.IntRange(1, 1024),
            help="Blocks per group of --offload block (default 1).",
        ),
        click.option(
            "--vae-tiling",
            type=click.Choice(["auto", "on", "off"]),
            help="Tile VAE decode/encode; auto (default): when it would not fit.",
        ),
        click.option(
            "--vae-slicing",
            type=click.Choice(["auto", "on", "off"]),
            help="Decode a batch one sample at a time (auto: with tiling).",
        ),
        click.option(
            "--vae-tile",
            type=click.IntRange(16, 8192),
            metavar="PX",
            help="Tile size in pixels (default: the VAE's own).",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def memory_kwargs(
    *,
    lora_specs: tuple[str, ...] = (),
    fuse_lora: str | None = None,
    lora_steps: int | None = None,
    lora_guidance: float | None = None,
    lora_max_active: int | None = None,
    lora_max_memory: float | None = None,
    offload: str | None = None,
    max_gpu_memory: float | None = None,
    offload_blocks: int | None = None,
    vae_tiling: str | None = None,
    vae_slicing: str | None = None,
    vae_tile: int | None = None,
) -> dict[str, Any]:
    """The ``Omni(...)`` keywords of the flags (only those given), validated now."""
    from omni_core.contract.config import as_lora_config, as_memory_config, parse_lora_spec
    from omni_core.contract.errors import ConfigError
    from omni_core.diffusion.acceleration.lora import resolve_lora_file

    out: dict[str, Any] = {}
    lora: dict[str, Any] = {"adapters": [parse_lora_spec(s) for s in lora_specs]}
    for key, value in (
        ("fuse", fuse_lora),
        ("steps", lora_steps),
        ("guidance_scale", lora_guidance),
        ("max_active", lora_max_active),
        ("max_memory_mb", lora_max_memory),
    ):
        if value is not None:
            lora[key] = value
    if len(lora) > 1 and not lora_specs:
        raise ConfigError("lora: --fuse-lora / --lora-* need at least one --lora NAME=PATH")
    if lora_specs:
        config = as_lora_config(lora)
        if config.fuse is not None and config.fuse not in {a.name for a in config.adapters}:
            raise ConfigError(f"fuse_lora: {config.fuse!r} is not one of the --lora names")
        for adapter in config.adapters:  # a missing file fails now, not after a long load
            resolve_lora_file(adapter.path)
        out["lora"] = config.model_dump(exclude_defaults=True)
    memory = {
        key: value
        for key, value in (
            ("offload", offload),
            ("max_gpu_memory", max_gpu_memory),
            ("blocks_per_group", offload_blocks),
            ("vae_tiling", vae_tiling),
            ("vae_slicing", vae_slicing),
            ("vae_tile", vae_tile),
        )
        if value is not None
    }
    if memory:
        as_memory_config(memory)
        out["offload"] = memory
    return out


__all__ = ["memory_kwargs", "memory_options"]
