"""Make a diffusers denoiser parallel in a few lines: ``parallelize_denoiser(model)``.

Inside a worker (where :func:`~omni_core.diffusion.distributed.groups.current_parallel_state` is
set):

- **Ulysses** (``ulysses_degree > 1``): hooks shard the hidden states along the sequence before the
  first transformer block and gather them after the last one, slicing every per-token side input
  (rotary embeddings, per-token timestep embeddings, modulation indices) the same way; the
  self/joint attention of those blocks is rerouted through
  :class:`~omni_core.diffusion.distributed.ulysses.SequenceParallel` (text tokens replicated),
  cross attention stays local, and attention outside the plan's blocks (which sees whole
  sequences) keeps the pipeline's kernels. Where to cut is the
  :class:`~omni_core.diffusion.denoisers.SequencePlan` of the denoiser class, part of the
  :class:`~omni_core.diffusion.denoisers.DenoiserAdapter` its model plugin registers
  (``omni_register_denoisers``); the core knows no model's plan.
- **CFG-parallel** (``cfg_parallel_size == 2``): :class:`BatchSplitParallel` wraps the model.
  Pipelines that batch ``[cond; uncond]`` rows into one forward keep doing so; each cfg rank
  runs one half of the rows and the halves are all-gathered. (A batch with an odd number of
  rows, e.g. no CFG and one request, runs whole on both ranks: same result, no speed-up.)
  A model that returns several per-row outputs (a tuple, e.g. LTX-2's video and audio
  predictions) gets every one of them gathered.
  Pipelines that run the branches as separate forwards call
  :func:`~omni_core.diffusion.distributed.cfg.cfg_parallel_forward` instead.

Fidelity: every rank runs exactly the single-process math on its part; Ulysses attention is
exact. The cfg halves run as batch-B forwards instead of one batch-2B forward, which can change
the lowest bits of matmuls (kernels tile differently per batch size); see the docs.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from omni_core.diffusion.denoisers import DenoiserWrapper, resolve_denoiser
from omni_core.diffusion.distributed.errors import DistributedError
from omni_core.diffusion.distributed.groups import ParallelState, current_parallel_state
from omni_core.diffusion.distributed.ulysses import SequenceParallel, sequence_parallel_blocks

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.attention import AttentionRouter
    from omni_core.contract.registry import Registry


def _dynamic_router() -> AttentionRouter:
    from omni_core.contract.attention import ROLES, AttentionRouter, dispatch_attention

    return AttentionRouter(
        functions={r: functools.partial(dispatch_attention, role=r) for r in ROLES},
        names={r: "dispatch" for r in ROLES},
    )


class BatchSplitParallel(DenoiserWrapper):
    """Run half of a batch on each rank of a 2-rank group and all-gather the outputs.

    Every tensor argument whose first dimension equals the batch rows of ``hidden_states`` is
    split, and so is every list of that length (per-row metadata, e.g. per-sample image
    shapes); everything else passes through. Attribute access (``dtype``,
    ``config``...) reaches the wrapped model, so pipelines keep using it as the model.
    """

    def __init__(self, model: Any, group: Any) -> None:
        import torch.distributed as dist

        self.model = model
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        from omni_core.diffusion.distributed.cfg import cfg_parallel_forward

        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if not isinstance(hidden, torch.Tensor):
            raise DistributedError("BatchSplitParallel: hidden_states must be a tensor")
        rows = hidden.shape[0]
        if rows % self.size:
            return self.model(*args, **kwargs)
        half = rows // self.size

        def part(i: int) -> tuple[tuple, dict]:
            def cut(v: Any) -> Any:
                # Per-row tensors, and per-row lists (per-sample metadata), are split.
                if isinstance(v, torch.Tensor) and v.ndim and v.shape[0] == rows:
                    return v[i * half : (i + 1) * half]
                if isinstance(v, list) and len(v) == rows:
                    return v[i * half : (i + 1) * half]
                return v

            return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}

        box: dict[str, Any] = {}

        def forward(a: tuple, kw: dict) -> torch.Tensor:
            out = self.model(*a, **kw)
            box["out"] = out
            parts = _row_outputs(out, half)
            box["parts"] = parts
            if len(parts) == 1:
                return parts[0][1]
            # Several per-row outputs travel as one [half, sum of their sizes] tensor.
            if len({t.dtype for _, t in parts}) > 1:
                raise DistributedError("BatchSplitParallel: per-row outputs differ in dtype")
            return torch.cat([t.reshape(half, -1) for _, t in parts], dim=1)

        first, second = cfg_parallel_forward(forward, part(0), part(1), self.group)
        full = torch.cat([first, second])
        parts = box["parts"]
        if len(parts) == 1:
            return _rebuild(box["out"], full)
        sizes = [t[0].numel() for _, t in parts]
        gathered = [
            chunk.reshape(rows, *t.shape[1:])
            for chunk, (_, t) in zip(full.split(sizes, dim=1), parts, strict=True)
        ]
        out = list(box["out"])
        for (index, _), tensor in zip(parts, gathered, strict=True):
            out[index] = tensor
        return tuple(out)


def _row_outputs(out: Any, half: int) -> list[tuple[int, Any]]:
    """(index, tensor) of the per-row outputs of ``out``: every tensor of a tuple with
    ``half`` rows, else the first tensor (its index 0)."""
    import torch

    if isinstance(out, tuple):
        rows = [
            (i, t)
            for i, t in enumerate(out)
            if isinstance(t, torch.Tensor) and t.ndim and t.shape[0] == half
        ]
        if len(rows) > 1:
            return rows
    return [(0, _first_tensor(out))]


def _first_tensor(out: Any) -> Any:
    if isinstance(out, tuple):
        return out[0]
    sample = getattr(out, "sample", None)
    return sample if sample is not None else out


def _rebuild(template: Any, full: Any) -> Any:
    if isinstance(template, tuple):
        return (full, *template[1:])
    if getattr(template, "sample", None) is not None:
        return type(template)(sample=full)
    return full


def parallelize_denoiser(
    model: torch.nn.Module,
    router: AttentionRouter | None = None,
    *,
    state: ParallelState | None = None,
    registry: Registry | None = None,
) -> Any:
    """Return ``model`` ready for this rank's layout (unchanged when running alone).

    ``router`` is the pipeline's attention router (``options.attention``); Ulysses wraps its
    self and joint roles. Pipelines call it in ``from_pretrained`` once per denoiser, after
    ``route_attention`` and ``apply_acceleration``, and use the returned object wherever the
    model was used; outside a worker group it is a no-op. ``registry`` (default: the process's)
    is where the denoiser's :class:`~omni_core.diffusion.denoisers.SequencePlan` is looked up.
    """
    state = state if state is not None else current_parallel_state()
    if state is None or state.world_size == 1:
        return model
    done = getattr(model, "_omni_parallel_wrapper", None)
    if done is not None:  # idempotent: asking twice gives the same wrapper
        return done
    if registry is None:
        from omni_core.contract.host import get_registry

        registry = get_registry()
    result = _parallelize(model, router, state, registry)
    model._omni_parallel_wrapper = result  # type: ignore[attr-defined]
    return result


def sequence_parallel_of(model: Any) -> SequenceParallel | None:
    """The Ulysses state :func:`parallelize_denoiser` gave ``model`` (None: not sharded)."""
    inner = model.model if isinstance(model, DenoiserWrapper) else model
    return getattr(inner, "_omni_sequence_parallel", None)


def _parallelize(
    model: Any, router: AttentionRouter | None, state: ParallelState, registry: Registry
) -> Any:
    if state.sequence_parallel:
        name = type(model).__name__
        plan = resolve_denoiser(model, registry).sequence_plan
        if plan is None:
            raise DistributedError(
                f"ulysses_degree={state.layout.ulysses_degree}: no sequence-parallel plan for "
                f"{name}; its model plugin must register a DenoiserSpec "
                "(omni_register_denoisers) whose DenoiserAdapter has a sequence_plan"
            )
        heads = getattr(getattr(model, "config", None), "num_attention_heads", None)
        if heads is not None and heads % state.layout.ulysses_degree:
            raise DistributedError(
                f"ulysses_degree={state.layout.ulysses_degree} does not divide {name}'s "
                f"{heads} attention heads"
            )
        from omni_core.diffusion.attention_routing import route_attention
        from omni_core.diffusion.distributed.key_gather import (
            gather_keys_router,
            route_plan_attention,
        )

        sp = SequenceParallel(state.ulysses_group, text_last=plan.text_last)
        names = (plan.blocks,) if isinstance(plan.blocks, str) else plan.blocks
        blocks = [block for name in names for block in getattr(model, name)]
        # Only the plan's blocks run on shards: attention elsewhere (Z-Image's refiners, a
        # text token refiner) sees whole sequences and keeps the pipeline's own kernels.
        base = router or _dynamic_router()
        routers = {
            "sharded": sp.router(base),
            "local": base,
            "gather_keys": gather_keys_router(sp, base),
        }
        for block in blocks:
            route_attention(block, routers["sharded"])
            route_plan_attention(block, dict(plan.attention), routers)
        model._omni_sp_hooks = sequence_parallel_blocks(  # type: ignore[attr-defined]
            blocks, sp, plan.shard_inputs, plan.gather_output
        )
        # on the module itself, where a pipeline's wrapper (a DenoiserWrapper) leads too
        inner = model.model if isinstance(model, DenoiserWrapper) else model
        inner._omni_sequence_parallel = sp
    if state.cfg_parallel:
        return BatchSplitParallel(model, state.cfg_group)
    return model
