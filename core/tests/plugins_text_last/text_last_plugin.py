"""A third-party-style model plugin for the Ulysses contract's ``SequencePlan.text_last``.

A toy denoiser whose joint attention concatenates the text *after* the image tokens and masks
the text padding with a square mask built from its local view (query padding & key padding),
as some diffusers processors do. Its attention processor calls a module-level
``dispatch_attention_fn``, so omni's routing (and Ulysses) can take it over; its adapter reaches
the core only through ``omni_register_denoisers``. :class:`TextLastProgram` runs it on every
rank of a worker group, alone and through ``parallelize_denoiser``, and reports the difference.

Not a test module: spawned workers import it by name (the test puts its folder on sys.path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from omni_core import DenoiserSpec, hookimpl
from omni_core.diffusion import DenoiserAdapter, SequencePlan
from omni_core.diffusion.distributed import WorkerContext, WorkerProgram

HEADS, HEAD_DIM, TEXT = 2, 4, 5


def dispatch_attention_fn(query: Any, key: Any, value: Any, attn_mask: Any = None) -> Any:
    """Attention on ``[B, S, H, D]`` (what omni's routing rebinds per processor)."""
    out = F.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=attn_mask
    )
    return out.transpose(1, 2)


class TextLastProcessor:
    """Joint attention over ``[image, text]``, the text padding masked by a square mask."""

    def __call__(self, attn: Any, hidden: Any, text: Any, text_mask: Any) -> Any:
        joint = torch.cat([hidden, text], dim=1)
        q, k, v = (p(joint).unflatten(2, (HEADS, HEAD_DIM)) for p in attn.qkv)
        valid = F.pad(text_mask, (hidden.shape[1], 0), value=True)
        mask = valid[:, None, None, :] & valid[:, None, :, None]
        out = dispatch_attention_fn(q, k, v, attn_mask=mask).flatten(2)
        return out[:, : hidden.shape[1]], out[:, hidden.shape[1] :]


class JointAttention(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(3))
        self.added_kv_proj_dim = dim  # joint attention, by omni's default role rule
        self.processor = TextLastProcessor()

    def forward(self, hidden: Any, text: Any, text_mask: Any) -> Any:
        return self.processor(self, hidden, text, text_mask)


class TextLastBlock(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.attn = JointAttention(dim)

    def forward(self, hidden: Any, text: Any, text_mask: Any) -> tuple[Any, Any]:
        a, t = self.attn(hidden, text, text_mask)
        return hidden + a, text + t


class Config(dict):
    """diffusers-style config: attribute access (the core reads ``num_attention_heads``)."""

    __getattr__ = dict.get


class TextLastTransformer(torch.nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        dim = HEADS * HEAD_DIM
        self.config = Config(num_attention_heads=HEADS)
        self.blocks = torch.nn.ModuleList(TextLastBlock(dim) for _ in range(layers))

    def forward(self, hidden: Any, text: Any, text_mask: Any) -> Any:
        for block in self.blocks:
            hidden, text = block(hidden, text, text_mask)
        return hidden


def _shard(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    hidden, text, text_mask = args
    return (sp.shard(hidden, dim=1) if first else hidden, text, text_mask), kwargs


def _gather(sp: Any, output: Any) -> Any:
    hidden, text = output
    return sp.gather(hidden, dim=1), text


ADAPTER = DenoiserAdapter(
    architecture="TextLastTransformer",
    blocks=("blocks",),
    sequence_plan=SequencePlan(
        blocks="blocks", shard_inputs=_shard, gather_output=_gather, text_last=True
    ),
)


class TextLastPlugin:
    """The plugin: its denoiser's facts, through the hook."""

    @hookimpl
    def omni_register_denoisers(self, register: Callable[[DenoiserSpec], None]) -> None:
        register(
            DenoiserSpec(
                name="text-last-transformer",
                architectures=("TextLastTransformer",),
                implementation="text_last_plugin:ADAPTER",
            )
        )


class TextLastProgram(WorkerProgram):
    """Every rank: the toy model alone, then Ulysses-parallel, on the same seeded inputs."""

    def setup(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def run(self, payload: Any) -> dict[str, float]:
        from omni_core.contract.host import PluginHost
        from omni_core.diffusion import parallelize_denoiser

        host = PluginHost(autoload=False)
        host.register_object("text-last", TextLastPlugin())
        torch.manual_seed(0)
        model = TextLastTransformer()
        tokens = int(payload["tokens"])
        hidden = torch.randn(2, tokens, HEADS * HEAD_DIM)
        text = torch.randn(2, TEXT, HEADS * HEAD_DIM)
        text_mask = torch.ones(2, TEXT, dtype=torch.bool)
        text_mask[0, 3:] = False  # padding in one row: masked keys and fully masked queries
        with torch.no_grad():
            alone = model(hidden, text, text_mask)
            parallel = parallelize_denoiser(model, state=self.ctx.state, registry=host.registry)
            got = parallel(hidden, text, text_mask)
        sp = getattr(model, "_omni_sequence_parallel", None)
        return {
            "error": float((got - alone).abs().max()),
            "shards": list(sp.sizes) if sp is not None else [],
        }
