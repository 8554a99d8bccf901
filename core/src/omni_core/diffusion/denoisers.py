"""What the core may know about one denoiser class, supplied by the plugin that owns it.

Acceleration (regional compile, quantization scoped to the repeated blocks, fused QKV, step
caches) and parallelism (Ulysses sequence parallelism) work on any denoiser module, but each
needs a few facts about its class: which ModuleLists hold the repeated blocks, whether QKV
fusion is exact, how TeaCache reads its indicator and which polynomial calibrates it, and how a
block's inputs are cut along the sequence. A model plugin states them once, as a
:class:`DenoiserAdapter`, and registers it with ``omni_register_denoisers``::

    @hookimpl
    def omni_register_denoisers(register):
        register(DenoiserSpec(name="wan-transformer", architectures=("WanTransformer3DModel",),
                              implementation="omni_wan.denoiser:wan_adapter"))

The core keeps no tables of its own: a class nobody registered gets :func:`generic_adapter`,
derived from its structure (block lists, no calibration, no sequence plan).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from omni_core.contract.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.registry import Registry

#: Names of ModuleLists that hold repeated transformer blocks (diffusers' conventions).
BLOCK_LIST_NAMES: tuple[str, ...] = (
    "blocks",
    "transformer_blocks",
    "single_transformer_blocks",
    "layers",
)

#: ``(block0, args, kwargs) -> Tensor``: TeaCache's indicator, computed from block 0's inputs.
Indicator = Callable[["torch.nn.Module", tuple, dict], "torch.Tensor"]


@dataclass(frozen=True)
class SequencePlan:
    """Where Ulysses cuts one denoiser class.

    ``blocks`` names the ModuleList of repeated blocks, or several in call order (Flux's
    double-stream ``transformer_blocks`` then its single-stream ``single_transformer_blocks``:
    the sequence stays sharded from the first block of the first list to the last block of
    the last). ``shard_inputs(sp, args, kwargs, first)`` returns a block's ``(args, kwargs)``
    with the per-token inputs cut to this rank's shard (``first`` is True for the first block,
    whose hidden states are still whole; later blocks receive shards already).
    ``gather_output(sp, output)`` reassembles the last block's output. ``sp`` is the
    :class:`omni_core.diffusion.distributed.ulysses.SequenceParallel` of the rank
    (``sp.shard``, ``sp.slice``, ``sp.gather``). ``text_last``: the class's joint attention
    concatenates the text *after* the video/image tokens (``[shard, text]``) rather than
    before them. ``attention`` says, per attention module of a block (its name in the block),
    how Ulysses runs it when its role alone does not say (a block with a second, unsharded
    stream: LTX-2's audio): ``"local"`` (the pipeline's own kernel: queries and keys are whole,
    or the queries are the shard and the keys whole), ``"gather_keys"`` (whole queries
    attending to the shard: keys and values are gathered over the sequence first) or
    ``"sharded"``; modules it does not name run by role (self and joint attention sharded,
    cross local).
    """

    blocks: str | tuple[str, ...]
    shard_inputs: Callable[..., tuple[tuple, dict]]
    gather_output: Callable[[Any, Any], Any]
    text_last: bool = False
    attention: Mapping[str, Literal["sharded", "local", "gather_keys"]] = field(
        default_factory=dict
    )


@dataclass(frozen=True)
class DenoiserAdapter:
    """The facts about one denoiser architecture that acceleration and parallelism use.

    ``teacache_indicator`` is either the name of a block-0 forward argument whose relative change
    across steps drives TeaCache (``"temb"``: the timestep modulation), or a callable
    ``(block0, args, kwargs) -> Tensor``. ``teacache_coefficients`` are numpy-``polyval``
    coefficients (highest power first) mapping that raw relative L1 change to the expected change
    of the output; ``(1.0, 0.0)`` is the identity. ``mag_ratios`` are MagCache's per-step
    magnitude ratios. ``fuse_qkv`` says whether the class's attention processors honour
    ``fuse_projections`` exactly. ``sequence_plan`` enables Ulysses for the class.
    ``cache_dit_pattern`` names the ``cache_dit.ForwardPattern`` of one block (how it takes and
    returns hidden and text states), for the optional DBCache backend. ``block_streams`` is for
    blocks that return several streams diffusers has no metadata for (LTX-2's video and audio):
    the forward arguments a block returns updated, in the order of its output tuple; the
    residual caches (first-block, TeaCache) then store and replay a residual per stream, and
    first-block measures the first. Empty: diffusers' block metadata (hidden states, plus the
    encoder hidden states of joint blocks). ``cache_blocks`` names the block lists the step
    caches wrap when that is not all of ``blocks``: a model whose first lists refine each input
    on its own before the joint blocks (Z-Image's noise and context refiners run on different
    token sets, so one residual cannot stand for all of them). Empty: ``blocks``.
    """

    architecture: str
    blocks: tuple[str, ...] = ("blocks",)
    fuse_qkv: bool = False
    teacache_indicator: str | Indicator = "temb"
    teacache_coefficients: tuple[float, ...] = (1.0, 0.0)
    teacache_source: str = "uncalibrated identity polynomial"
    mag_ratios: tuple[float, ...] | None = None
    mag_source: str = ""
    sequence_plan: SequencePlan | None = None
    cache_dit_pattern: str = "Pattern_2"
    block_streams: tuple[str, ...] = ()
    cache_blocks: tuple[str, ...] = ()
    notes: str = ""


def generic_adapter(module: Any) -> DenoiserAdapter:
    """An adapter from the module's structure alone: its block lists, no calibration data."""
    import torch

    names = tuple(
        name
        for name, child in module.named_children()
        if name in BLOCK_LIST_NAMES and isinstance(child, torch.nn.ModuleList) and len(child)
    )
    return DenoiserAdapter(architecture=type(module).__name__, blocks=names or ("blocks",))


class DenoiserWrapper:
    """A wrapper that stands in for a denoiser (e.g. a parallel wrapper): the core looks up
    facts by the class of :attr:`model`, the module it wraps."""

    model: Any


def resolve_denoiser(module: Any, registry: Registry) -> DenoiserAdapter:
    """The adapter for ``module``: the registered :class:`DenoiserSpec` of its class, else generic.

    A :class:`DenoiserWrapper` is looked up by the class it wraps.
    """
    if isinstance(module, DenoiserWrapper):
        module = module.model
    name = type(module).__name__
    spec = registry.denoiser_for(name)
    if spec is None:
        return generic_adapter(module)
    found = spec.load()
    adapter = found if isinstance(found, DenoiserAdapter) else found(module)
    if not isinstance(adapter, DenoiserAdapter):
        raise ConfigError(
            f"denoiser spec {spec.name!r} (plugin {spec.plugin}) gave {adapter!r} for {name}, "
            "not a DenoiserAdapter"
        )
    return adapter


def block_list(
    module: Any, adapter: DenoiserAdapter, lists: tuple[str, ...] | None = None
) -> list[tuple[str, Any]]:
    """``(qualified name, block)`` for every repeated block the adapter names (or of ``lists``),
    in call order."""
    import torch

    lists = lists or adapter.blocks
    out: list[tuple[str, Any]] = []
    for list_name in lists:
        blocks = getattr(module, list_name, None)
        if isinstance(blocks, torch.nn.ModuleList):
            out.extend((f"{list_name}.{i}", b) for i, b in enumerate(blocks))
    if not out:
        raise ConfigError(
            f"no repeated blocks found in {type(module).__name__} (looked for {lists}); "
            "its model plugin should register a DenoiserSpec (omni_register_denoisers)"
        )
    return out


def cache_block_list(module: Any, adapter: DenoiserAdapter) -> list[tuple[str, Any]]:
    """The blocks the step caches wrap: the adapter's ``cache_blocks``, else all its blocks."""
    return block_list(module, adapter, adapter.cache_blocks or None)
