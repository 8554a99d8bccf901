"""A sequence plan's per-module attention kinds (``SequencePlan.attention``) are checked when
Ulysses routes them: a name the block does not have, or a kind that does not exist, is a clear
error naming it (the gather itself is checked end to end by LTX-2's two-rank test)."""

from __future__ import annotations

import pytest
import torch

from omni_core.diffusion.distributed.errors import DistributedError
from omni_core.diffusion.distributed.key_gather import route_plan_attention


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.Linear(2, 2)


def test_a_module_the_block_lacks_is_named() -> None:
    with pytest.raises(DistributedError, match=r"'audio_attn'.*Block does not have"):
        route_plan_attention(Block(), {"audio_attn": "local"}, {"local": None})


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(DistributedError, match=r"'attn' is 'gathered'; use"):
        route_plan_attention(Block(), {"attn": "gathered"}, {"local": None})
