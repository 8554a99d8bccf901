"""Step caches over blocks that return several streams, as a third-party model plugin declares
them: a tiny two-stream denoiser (video-like and audio-like hidden states, each block updating
both), its adapter registered through ``omni_register_denoisers`` with ``block_streams``."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

from omni_core import DenoiserSpec, hookimpl
from omni_core.contract.config import CacheConfig
from omni_core.contract.errors import ConfigError
from omni_core.diffusion import DenoiserAdapter
from omni_core.diffusion.acceleration.cache import apply_cache
from omni_core.diffusion.acceleration.quality import psnr
from omni_core.diffusion.denoisers import resolve_denoiser

STEPS = 8
DIM = 16


class TwoStreamBlock(torch.nn.Module):
    """Updates both streams, each attending to the other's mean (as LTX-2's a2v / v2a)."""

    def __init__(self) -> None:
        super().__init__()
        self.video = torch.nn.Linear(DIM, DIM)
        self.audio = torch.nn.Linear(DIM, DIM)
        self.mod = torch.nn.Linear(DIM, DIM)

    def forward(
        self, hidden_states: torch.Tensor, audio_hidden_states: torch.Tensor, temb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        shift = self.mod(temb)[:, None]
        video = hidden_states + torch.tanh(
            self.video(hidden_states) + shift + audio_hidden_states.mean(1, keepdim=True)
        )
        audio = audio_hidden_states + torch.tanh(
            self.audio(audio_hidden_states) - shift + hidden_states.mean(1, keepdim=True)
        )
        return video, audio


class TwoStreamNet(torch.nn.Module):
    """The denoiser: a timestep embedding, four two-stream blocks, an output head per stream."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.time = torch.nn.Linear(1, DIM)
        self.blocks = torch.nn.ModuleList(TwoStreamBlock() for _ in range(4))
        self.out_video = torch.nn.Linear(DIM, DIM)
        self.out_audio = torch.nn.Linear(DIM, DIM)

    def forward(
        self, hidden_states: torch.Tensor, audio_hidden_states: torch.Tensor, timestep: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        temb = torch.nn.functional.silu(self.time(timestep[:, None] / 1000))
        video, audio = hidden_states, audio_hidden_states
        for block in self.blocks:  # positional and keyword streams: both are found
            video, audio = block(video, audio_hidden_states=audio, temb=temb)
        return self.out_video(video), self.out_audio(audio)


#: What the third-party plugin registers for its denoiser class.
ADAPTER = DenoiserAdapter(
    architecture="TwoStreamNet",
    blocks=("blocks",),
    teacache_indicator="temb",
    block_streams=("hidden_states", "audio_hidden_states"),
)
WRONG = DenoiserAdapter(architecture="TwoStreamNet", block_streams=("hidden_states", "sound"))


class TwoStreamPlugin:
    """A model plugin registering the two-stream adapter (``implementation`` names it)."""

    def __init__(self, implementation: str = f"{__name__}:ADAPTER") -> None:
        self.implementation = implementation

    @hookimpl
    def omni_register_denoisers(self, register: Any) -> None:
        register(
            DenoiserSpec(
                name="two-stream",
                architectures=("TwoStreamNet",),
                implementation=self.implementation,
            )
        )


@pytest.fixture(scope="module")
def streams_registry(registry_with: Any) -> Any:
    return registry_with(TwoStreamPlugin())


def _loop(model: Any, name: str | None, handle: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A tiny Euler loop over both streams; the cache context wraps each denoiser call."""
    g = torch.Generator().manual_seed(1)
    video, audio = torch.randn(1, 12, DIM, generator=g), torch.randn(1, 5, DIM, generator=g)
    for t in torch.linspace(999, 50, STEPS):
        with handle.context(name) if handle else contextlib.nullcontext(), torch.no_grad():
            v, a = model(video, audio, t.reshape(1))
        video, audio = video - v / STEPS, audio - a / STEPS
    return video, audio


@pytest.fixture(scope="module")
def uncached() -> tuple[torch.Tensor, torch.Tensor]:
    return _loop(TwoStreamNet(), None)


def test_the_plugin_adapter_is_resolved(streams_registry: Any) -> None:
    assert resolve_denoiser(TwoStreamNet(), streams_registry) is ADAPTER


@pytest.mark.parametrize("backend", ["first-block", "teacache"])
def test_threshold_zero_is_bit_equal(backend: str, streams_registry: Any, uncached: Any) -> None:
    model = TwoStreamNet()
    config = CacheConfig(backend=backend, options={"threshold": 0.0})
    handle = apply_cache(model, config, registry=streams_registry)
    video, audio = _loop(model, "r:main", handle)
    assert torch.equal(video, uncached[0]) and torch.equal(audio, uncached[1])
    stats = handle.finish(["r:main"])
    assert (stats.calls, stats.hits) == (STEPS, 0)


@pytest.mark.parametrize(
    ("backend", "threshold"), [("first-block", 0.3), ("teacache", 0.2)], ids=["fbc", "tea"]
)
def test_lossy_cache_skips_steps_and_keeps_both_streams(
    backend: str, threshold: float, streams_registry: Any, uncached: Any
) -> None:
    model = TwoStreamNet()
    config = CacheConfig(backend=backend, options={"threshold": threshold})
    handle = apply_cache(model, config, registry=streams_registry)
    video, audio = _loop(model, "r:main", handle)
    stats = handle.finish(["r:main"])
    assert stats.calls == STEPS and 0 < stats.hits < STEPS
    # Both streams move by cached residuals on a skipped step, so both stay near the uncached
    # result; dropping the audio residual (passing audio through) would not.
    for ours, ref in zip((video, audio), uncached, strict=True):
        assert not torch.equal(ours, ref)
        assert psnr(ref.numpy(), ours.numpy(), data_range=float(ref.max() - ref.min())) > 25


@pytest.mark.parametrize("backend", ["first-block", "teacache"])
def test_a_skipped_call_replays_every_stream(backend: str, streams_registry: Any) -> None:
    """The same inputs twice: the second call is served from the cache and returns the first
    call's two outputs (input + each stream's residual of the skipped blocks)."""
    model = TwoStreamNet()
    config = CacheConfig(backend=backend, options={"threshold": 0.5})
    handle = apply_cache(model, config, registry=streams_registry)
    g = torch.Generator().manual_seed(2)
    video, audio, t = torch.randn(2, 7, DIM, generator=g), torch.randn(2, 3, DIM), torch.ones(2)
    with torch.no_grad():
        with handle.context("x"):
            first = model(video, audio, t)
        with handle.context("x"):
            second = model(video, audio, t)
    assert handle.finish(["x"]).hits == 1
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", ["magcache"])
def test_backends_without_stream_support_refuse_clearly(
    backend: str, streams_registry: Any
) -> None:
    config = CacheConfig(backend=backend, options={})
    with pytest.raises(ConfigError, match=r"hidden_states, audio_hidden_states.*first-block"):
        apply_cache(TwoStreamNet(), config, registry=streams_registry)


@pytest.mark.parametrize("backend", ["first-block", "teacache"])
def test_streams_the_block_does_not_take_are_refused(backend: str, registry_with: Any) -> None:
    registry = registry_with(TwoStreamPlugin(f"{__name__}:WRONG"))
    with pytest.raises(ConfigError, match=r"names sound, which TwoStreamBlock\.forward does not"):
        apply_cache(TwoStreamNet(), CacheConfig(backend=backend), registry=registry)
