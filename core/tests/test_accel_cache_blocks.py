"""Step caches over part of a denoiser's blocks, as a third-party model plugin declares it with
``DenoiserAdapter.cache_blocks``: a tiny denoiser whose ``refiners`` run on the prompt's tokens
alone before its joint ``blocks`` (as Z-Image's refiners do). Compile and quantization see
every list; the caches wrap the joint blocks only, so the refiners always run."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

from omni_core import DenoiserSpec, hookimpl
from omni_core.contract.config import CacheConfig
from omni_core.diffusion import DenoiserAdapter
from omni_core.diffusion.acceleration.cache import apply_cache
from omni_core.diffusion.denoisers import block_list, cache_block_list, resolve_denoiser

STEPS = 8
DIM = 16


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(DIM, DIM)
        self.mod = torch.nn.Linear(DIM, DIM)

    def forward(self, hidden_states: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        return hidden_states + torch.tanh(self.proj(hidden_states) + self.mod(temb)[:, None])


class RefinedNet(torch.nn.Module):
    """Refiners over the prompt's 3 tokens, then joint blocks over image + prompt tokens."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.time = torch.nn.Linear(1, DIM)
        self.refiners = torch.nn.ModuleList(Block() for _ in range(2))
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))

    def forward(
        self, hidden_states: torch.Tensor, prompt: torch.Tensor, timestep: torch.Tensor
    ) -> torch.Tensor:
        temb = torch.nn.functional.silu(self.time(timestep[:, None] / 1000))
        for refiner in self.refiners:
            prompt = refiner(prompt, temb)
        joint = torch.cat([hidden_states, prompt], dim=1)
        for block in self.blocks:
            joint = block(joint, temb)
        return joint[:, : hidden_states.shape[1]]


#: The block class is the plugin's own (diffusers has no metadata for it): its one stream is
#: declared, so the stream-aware hooks carry it.
ADAPTER = DenoiserAdapter(
    architecture="RefinedNet",
    blocks=("refiners", "blocks"),
    cache_blocks=("blocks",),
    block_streams=("hidden_states",),
)


class RefinedPlugin:
    @hookimpl
    def omni_register_denoisers(self, register: Any) -> None:
        register(
            DenoiserSpec(
                name="refined", architectures=("RefinedNet",), implementation=f"{__name__}:ADAPTER"
            )
        )


@pytest.fixture(scope="module")
def registry(registry_with: Any) -> Any:
    return registry_with(RefinedPlugin())


def _loop(model: RefinedNet, handle: Any = None) -> tuple[torch.Tensor, list[int]]:
    """A tiny Euler loop; returns the latents and the computed calls of refiners[1], blocks[1]."""
    calls = [0, 0]
    hooks = [
        model.refiners[1].proj.register_forward_pre_hook(
            lambda *_: calls.__setitem__(0, calls[0] + 1)
        ),
        model.blocks[1].proj.register_forward_pre_hook(
            lambda *_: calls.__setitem__(1, calls[1] + 1)
        ),
    ]
    g = torch.Generator().manual_seed(1)
    x, prompt = torch.randn(1, 6, DIM, generator=g), torch.randn(1, 3, DIM, generator=g)
    try:
        for t in torch.linspace(999, 50, STEPS):
            with handle.context("r") if handle else contextlib.nullcontext(), torch.no_grad():
                x = x - model(x, prompt, t.reshape(1)) / STEPS
    finally:
        for hook in hooks:
            hook.remove()
    return x, calls


def test_the_caches_see_the_declared_lists_and_the_rest_see_all(registry: Any) -> None:
    model = RefinedNet()
    adapter = resolve_denoiser(model, registry)
    assert [n for n, _ in block_list(model, adapter)][:2] == ["refiners.0", "refiners.1"]
    assert [n for n, _ in cache_block_list(model, adapter)] == ["blocks.0", "blocks.1", "blocks.2"]
    plain = DenoiserAdapter(architecture="RefinedNet", blocks=("refiners", "blocks"))
    assert len(cache_block_list(model, plain)) == 5  # empty cache_blocks: every block


def test_first_block_skips_the_joint_blocks_and_runs_the_refiners(registry: Any) -> None:
    reference, plain_calls = _loop(RefinedNet())
    assert plain_calls == [STEPS, STEPS]
    exact = RefinedNet()
    handle = apply_cache(
        exact, CacheConfig(backend="first-block", options={"threshold": 0.0}), registry=registry
    )
    same, _ = _loop(exact, handle)
    assert torch.equal(same, reference)
    model = RefinedNet()
    config = CacheConfig(backend="first-block", options={"threshold": 0.5})
    handle = apply_cache(model, config, registry=registry)
    _, (refined, joint) = _loop(model, handle)
    hits = handle.finish(["r"]).hits
    assert 0 < hits < STEPS
    assert refined == STEPS  # outside the cache: always computed
    assert joint == STEPS - hits  # a hit is a call the joint block 1 never made
