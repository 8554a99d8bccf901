"""Hook specifications: the whole contract between omni-core and its plugins.

Collection hooks receive a ``register`` callback and call it once per thing they provide, with a
spec from :mod:`omni_core.contract.registry`. That style (borrowed from simonw/llm) keeps
registration additive and order-free, and lets the core validate each spec and record which plugin
made it. Specs point at implementations lazily (``"module:attr"``), so registering never imports
torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    import click

    from omni_core.contract.registry import (
        AttentionBackendSpec,
        BenchmarkSpec,
        CacheBackendSpec,
        DenoiserSpec,
        PipelineSpec,
        PlatformSpec,
        QuantizerSpec,
    )

PROJECT_NAME = "omni"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    """Register model pipelines.

    Call ``register(PipelineSpec(...))`` once per pipeline. A pipeline spec names the tasks it
    serves (``t2v``, ``t2i``, ``tts``, ...), the checkpoint architectures it claims (diffusers
    ``model_index.json`` ``_class_name`` or transformers ``config.json`` ``architectures``) and
    its implementation class as ``"module:Class"``.
    """


@hookspec
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    """Register attention backends.

    Call ``register(AttentionBackendSpec(...))``. The implementation is a function
    ``fn(q, k, v, *, attn_mask=None, scale=None) -> out`` over ``[batch, seq, heads, head_dim]``
    tensors; ``availability`` points at a cheap check that says whether it can run here.
    """


@hookspec
def omni_register_cache_backends(register: Callable[[CacheBackendSpec], None]) -> None:
    """Register step-cache backends (first-block cache, TeaCache, ...).

    Call ``register(CacheBackendSpec(...))``. Lossy backends must say so (``lossy=True``) so that
    users are shown their quality cost.
    """


@hookspec
def omni_register_quantizers(register: Callable[[QuantizerSpec], None]) -> None:
    """Register weight/activation quantizers.

    Call ``register(QuantizerSpec(...))``. The implementation is applied to one pipeline component
    (by default the denoiser's linear layers only).
    """


@hookspec
def omni_register_platforms(register: Callable[[PlatformSpec], None]) -> None:
    """Register hardware platforms.

    Call ``register(PlatformSpec(...))``. ``detector`` must be cheap and side-effect free: it is
    called by ``omni doctor`` and at start-up to pick the highest-priority available platform.
    """


@hookspec
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    """Describe denoiser classes to acceleration and parallelism.

    Call ``register(DenoiserSpec(...))`` once per denoiser class family your pipelines run (e.g.
    diffusers' ``WanTransformer3DModel``). The implementation is a
    :class:`omni_core.diffusion.DenoiserAdapter` (or a ``(module) -> DenoiserAdapter`` function):
    which ModuleLists hold the repeated blocks (regional compile, quantization, step caches),
    whether fused QKV is exact, TeaCache/MagCache calibration data, and the
    :class:`omni_core.diffusion.SequencePlan` that Ulysses sequence parallelism cuts the blocks
    with. This is the only way the core learns about one model: it keeps no tables of its own.
    """


@hookspec
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    """Register benchmark workloads for ``omni bench pipeline``.

    Call ``register(BenchmarkSpec(...))``. The implementation is an
    :class:`omni_core.bench.Workload`: it writes a real-layout random-weight checkpoint of
    the size it names, gives the request to time, and loads the reference implementation
    (e.g. the diffusers pipeline) from the same folder, so omni is measured on the code path
    ``omni serve`` runs, side by side with the reference in one run.
    """


@hookspec
def omni_register_commands(cli: click.Group) -> None:
    """Add click commands to the ``omni`` CLI (``cli.add_command(...)`` or ``@cli.command()``)."""


#: Collection hooks and the registry kind each fills, in a stable order.
COLLECTION_HOOKS: dict[str, str] = {
    "omni_register_pipelines": "pipelines",
    "omni_register_attention_backends": "attention_backends",
    "omni_register_cache_backends": "cache_backends",
    "omni_register_quantizers": "quantizers",
    "omni_register_platforms": "platforms",
    "omni_register_denoisers": "denoisers",
    "omni_register_benchmarks": "benchmarks",
}

ALL_HOOKS: tuple[str, ...] = (*COLLECTION_HOOKS, "omni_register_commands")
