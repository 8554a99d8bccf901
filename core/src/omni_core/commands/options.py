"""Options shared by ``omni generate`` and ``omni serve``: acceleration flags, ``KEY=VALUE``
lists, and the loading options checked before any weights load (exit code 2 on a mistake)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def acceleration_options(func: Any) -> Any:
    """``--cache``, ``--cache-option``, ``--quantization``, ``--fp8``, ``--compile/--no-compile``.

    Shared by ``omni generate video|image`` and ``omni serve``; :func:`acceleration_kwargs`
    turns them into ``Omni(...)`` keywords.
    """
    options = [
        click.option(
            "--cache",
            "cache",
            metavar="NAME",
            help="Step cache backend (see `omni list-plugins`), e.g. teacache. Lossy.",
        ),
        click.option(
            "--cache-option",
            "cache_options",
            multiple=True,
            metavar="KEY=VALUE",
            help="Option of the step cache (repeatable); VALUE is JSON when it parses.",
        ),
        click.option(
            "--quantization",
            metavar="NAME",
            help="Quantizer of the denoiser's linear layers (see `omni list-plugins`), e.g. fp8.",
        ),
        click.option(
            "--fp8",
            is_flag=True,
            default=False,
            help="fp8 mode: fp8 linears (--quantization fp8 unless another is named) and fp8 "
            "attention on the pipeline's heavy attention roles. Lossy.",
        ),
        click.option(
            "--compile/--no-compile",
            "compile_",
            default=None,
            help="torch.compile the repeated blocks (default: on for CUDA, off on CPU).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def acceleration_kwargs(
    cache: str | None,
    cache_options: tuple[str, ...],
    quantization: str | None,
    compile_: bool | None,
    fp8: bool = False,
) -> dict[str, Any]:
    """The ``Omni(...)`` keywords of :func:`acceleration_options`, names checked now.

    Unknown cache backends or quantizers raise ConfigError (exit 2) from the registry, before
    any weights load; the registry holds only specs, so this imports no torch.
    """
    from omni_core.contract.errors import ConfigError
    from omni_core.contract.host import get_registry

    kwargs: dict[str, Any] = {}
    if cache_options and not cache:
        raise click.BadParameter("needs --cache NAME", param_hint="--cache-option")
    registry = get_registry()
    if cache:
        if cache not in registry.cache_backends:
            known = ", ".join(sorted(registry.cache_backends)) or "none"
            raise ConfigError(f"cache.backend: unknown cache backend {cache!r}; known: {known}")
        opts = key_values(cache_options, "--cache-option")
        kwargs["cache"] = {"backend": cache, "options": opts}
    if quantization:
        if quantization not in registry.quantizers:
            known = ", ".join(sorted(registry.quantizers)) or "none"
            raise ConfigError(
                f"quantization.method: unknown quantizer {quantization!r}; known: {known}"
            )
        kwargs["quantization"] = quantization
    if fp8:
        kwargs["fp8"] = True
    if compile_ is not None:
        # omni_core.diffusion.acceleration.apply_acceleration reads options.extra["compile"].
        kwargs["compile"] = compile_
    return kwargs


def check_load_options(
    device: str | None, dtype: str | None, attention_backend: str | None, *, fp8: bool = False
) -> None:
    """Check the loading options ``Omni(...)`` would refuse only after a moment's work, now:
    a device this machine lacks (``--device cuda`` on a CPU-only torch, ``--device banana``), an
    unknown dtype or attention backend, ``--fp8`` with no usable fp8 attention backend. Each is
    a ConfigError: one line, exit code 2.

    Shared by ``omni generate video|image`` and ``omni serve`` (before a port is bound).
    """
    if device is None and dtype is None and attention_backend is None and not fp8:
        return
    from omni_core.api import _as_config, resolve_device
    from omni_core.contract.attention import AttentionRouter
    from omni_core.contract.config import AttentionConfig
    from omni_core.contract.dtypes import parse_dtype
    from omni_core.contract.host import get_registry
    from omni_core.contract.platforms import current_platform

    platform = current_platform()
    resolve_device(device, platform)
    parse_dtype(dtype, "float32")
    AttentionRouter.build(
        _as_config(attention_backend, AttentionConfig, "attention"), get_registry(), platform
    )
    if fp8:
        from omni_core.contract.fp8_mode import fp8_attention_backend

        fp8_attention_backend(get_registry(), platform)


def check_option_keys(options: dict[str, Any]) -> None:
    """Refuse ``--option`` keys that can only be mistakes, naming the key (ConfigError, exit 2):
    a near miss of one of ``Omni(...)``'s own keywords (``quantisation`` for ``quantization``:
    it would load unquantised without a word) and ``trust_remote_code`` (never honoured).

    The keywords come from the loader's signature, not a list here. Other keys go to the
    pipeline as ``options.extra``; which of those a pipeline reads is not declared yet.
    """
    import difflib
    import inspect

    from omni_core.api import Omni
    from omni_core.contract.errors import ConfigError

    own = [p for p in inspect.signature(Omni.__init__).parameters if p not in ("self", "model")]
    own += ["compile"]  # read by omni_core.diffusion.acceleration from options.extra
    for key in options:
        if key == "trust_remote_code":
            raise ConfigError(
                f"--option {key}: omni never runs code shipped with a checkpoint; remove it"
            )
        if key in own:
            continue
        close = difflib.get_close_matches(key, own, n=1, cutoff=0.8)
        if close:
            raise ConfigError(
                f"--option {key}: unknown option; did you mean {close[0]!r}? (as typed it "
                "would be passed on and ignored)"
            )


def parse_extras(items: tuple[str, ...]) -> dict[str, Any]:
    """``key=value`` pairs; values parsed as JSON when possible (``3``, ``true``, ``[1,2]``)."""
    return key_values(items, "--extra")


def key_values(items: tuple[str, ...], hint: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=hint)
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def output_file(what: str, suffixes: tuple[str, ...]) -> Callable[..., Path]:
    """A click callback for ``-o``: a file whose suffix is one of ``suffixes``.

    A folder (one that exists, or a path ending in a separator) is refused in one line that
    names a file to give instead: every ``omni generate`` command writes one file.
    """
    names = ", ".join(suffixes[:-1]) + (" or " if len(suffixes) > 1 else "") + suffixes[-1]

    def check(ctx: click.Context, param: click.Parameter, value: str | Path) -> Path:
        text = str(value)
        path = Path(text)
        if text.endswith(("/", "\\")) or path.is_dir():
            example = path / f"out{suffixes[0]}"
            raise click.BadParameter(f"{text!r} is a folder; name a file in it, e.g. {example}")
        if path.suffix.lower() not in suffixes:
            raise click.BadParameter(f"the {what} output must end in {names}")
        return path

    return check


def with_article(noun: str) -> str:
    """``"an image"``, ``"a video"``, ``"a speech"``: the noun with its indefinite article."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
