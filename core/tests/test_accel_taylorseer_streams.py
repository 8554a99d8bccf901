"""TaylorSeer over declared streams: two tiny third-party denoisers (blocks returning a bare
tensor, blocks returning two streams) whose adapters declare ``block_streams``. A schedule that
never skips is bit-equal to no cache; a skipped call returns, per block and stream, the Taylor
expansion of that block's recorded full computes (checked against the formula here); request
contexts keep their own factors and hit counts; bad options are ConfigErrors."""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import pytest
import torch

from omni_core import DenoiserSpec, hookimpl
from omni_core.contract.config import CacheConfig
from omni_core.contract.errors import ConfigError
from omni_core.diffusion import DenoiserAdapter
from omni_core.diffusion.acceleration.cache import apply_cache

STEPS = 8
DIM = 8
#: warmup 2, interval 3: diffusers' schedule computes calls 0, 1, 3, 6 and predicts 2, 4, 5, 7.
SKIPPING = {"cache_interval": 3, "warmup_steps": 2, "factors_dtype": "float32"}
COMPUTED = (0, 1, 3, 6)


class BareBlock(torch.nn.Module):
    """One stream, returned as a bare tensor (Stable Audio's and Z-Image's layout)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(DIM, DIM)
        self.mod = torch.nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.lin(x) + self.mod(temb)[:, None])


class PairBlock(torch.nn.Module):
    """Two streams returned as a tuple, each reading the other (HunyuanVideo's layout)."""

    def __init__(self) -> None:
        super().__init__()
        self.video = torch.nn.Linear(DIM, DIM)
        self.text = torch.nn.Linear(DIM, DIM)
        self.mod = torch.nn.Linear(DIM, DIM)

    def forward(
        self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor, temb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        shift = self.mod(temb)[:, None]
        text_mean = encoder_hidden_states.mean(1, keepdim=True)
        video = hidden_states + torch.tanh(self.video(hidden_states) + shift + text_mean)
        text = encoder_hidden_states + torch.tanh(
            self.text(encoder_hidden_states) - shift + hidden_states.mean(1, keepdim=True)
        )
        return video, text


class BareNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.time = torch.nn.Linear(1, DIM)
        self.blocks = torch.nn.ModuleList(BareBlock() for _ in range(3))
        self.out = torch.nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor, text: torch.Tensor, timestep: torch.Tensor) -> tuple:
        temb = torch.nn.functional.silu(self.time(timestep[:, None] / 1000))
        for block in self.blocks:
            x = block(x, temb)
        return self.out(x), text


class PairNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.time = torch.nn.Linear(1, DIM)
        self.blocks = torch.nn.ModuleList(PairBlock() for _ in range(3))
        self.out = torch.nn.Linear(DIM, DIM)
        self.out_text = torch.nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor, text: torch.Tensor, timestep: torch.Tensor) -> tuple:
        temb = torch.nn.functional.silu(self.time(timestep[:, None] / 1000))
        for block in self.blocks:  # positional and keyword streams: both are found
            x, text = block(x, encoder_hidden_states=text, temb=temb)
        return self.out(x), self.out_text(text)


BARE = DenoiserAdapter(architecture="BareNet", block_streams=("x",))
PAIR = DenoiserAdapter(
    architecture="PairNet", block_streams=("hidden_states", "encoder_hidden_states")
)


class StreamsPlugin:
    @hookimpl
    def omni_register_denoisers(self, register: Any) -> None:
        for name, arch in (("BARE", "BareNet"), ("PAIR", "PairNet")):
            register(
                DenoiserSpec(
                    name=arch.lower(), architectures=(arch,), implementation=f"{__name__}:{name}"
                )
            )


@pytest.fixture(scope="module")
def streams_registry(registry_with: Any) -> Any:
    return registry_with(StreamsPlugin())


NETS = {"bare": BareNet, "pair": PairNet}
ADAPTERS = {"bare": BARE, "pair": PAIR}


def _loop(model: Any, name: str | None, handle: Any = None, seed: int = 1) -> list[torch.Tensor]:
    """A tiny Euler loop over both inputs; the cache context wraps each denoiser call."""
    g = torch.Generator().manual_seed(seed)
    x, text = torch.randn(2, 6, DIM, generator=g), torch.randn(2, 3, DIM, generator=g)
    for t in torch.linspace(999, 50, STEPS):
        with handle.context(name) if handle else contextlib.nullcontext(), torch.no_grad():
            v, w = model(x, text, t.reshape(1).expand(2))
        x, text = x - v / STEPS, text - w / STEPS
    return [x, text]


def _cache(model: Any, registry: Any, **options: Any) -> Any:
    return apply_cache(model, CacheConfig(backend="taylorseer", options=options), registry=registry)


class _Record:
    """Every call's output streams of each block (what the rest of the model received)."""

    def __init__(self, model: Any) -> None:
        self.calls: list[list[list[torch.Tensor]]] = [[] for _ in model.blocks]
        self.hooks = [
            block.register_forward_hook(functools.partial(self._keep, i))
            for i, block in enumerate(model.blocks)
        ]

    def _keep(self, index: int, module: Any, args: Any, output: Any) -> None:
        streams = list(output) if isinstance(output, tuple) else [output]
        self.calls[index].append([s.clone() for s in streams])


def _taylor(history: list[tuple[int, torch.Tensor]], order: int, step: int) -> torch.Tensor:
    """The expansion by hand: divided differences of the last ``order + 1`` full computes
    (diffusers' recursion: each compute differences its factors against the previous ones)."""
    factors: list[torch.Tensor] = []
    last = None
    for s, y in history:
        new = [y]
        if last is not None:
            for j in range(min(order, len(factors))):
                new.append((new[j] - factors[j]) / (s - last))
        factors, last = new, s
    assert last is not None
    d = step - last
    return sum(f * (d**k / math.factorial(k)) for k, f in enumerate(factors))  # type: ignore[return-value]


@pytest.mark.parametrize("net", sorted(NETS))
def test_a_schedule_that_never_skips_is_bit_equal(net: str, streams_registry: Any) -> None:
    reference = _loop(NETS[net](), None)
    model = NETS[net]()
    handle = _cache(model, streams_registry, cache_interval=1, warmup_steps=0, max_order=2)
    assert handle.options["streams"] == list(ADAPTERS[net].block_streams)
    ours = _loop(model, "r:cond", handle)
    for a, b in zip(ours, reference, strict=True):
        assert torch.equal(a, b)
    assert handle.finish(["r:cond"]).as_dict() == {"calls": STEPS, "hits": 0, "hit_rate": 0.0}


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("net", sorted(NETS))
def test_skipped_calls_return_each_streams_taylor_expansion(
    net: str, order: int, streams_registry: Any
) -> None:
    model = NETS[net]()
    handle = _cache(model, streams_registry, max_order=order, **SKIPPING)
    inner = []  # the blocks' own computes (a predicted call never reaches them)
    pre = model.blocks[1].mod.register_forward_pre_hook(lambda *a: inner.append(1))
    record = _Record(model)
    _loop(model, "r:cond", handle)
    pre.remove()
    assert len(inner) == len(COMPUTED)
    stats = handle.finish(["r:cond"])
    assert (stats.calls, stats.hits) == (STEPS, STEPS - len(COMPUTED))
    for calls in record.calls:
        assert len(calls) == STEPS
        for stream in range(len(calls[0])):
            for step in range(STEPS):
                if step in COMPUTED:
                    continue
                history = [(s, calls[s][stream]) for s in COMPUTED if s < step]
                want = _taylor(history, order, step)
                torch.testing.assert_close(calls[step][stream], want, rtol=1e-5, atol=1e-6)
    # Spelled out for block 0's last stream: call 2 from computes 0, 1; call 4 from 1, 3 (and,
    # at order 2, the slope of 0, 1).
    y = [c[-1] for c in record.calls[0]]
    torch.testing.assert_close(y[2], y[1] + (y[1] - y[0]), rtol=1e-5, atol=1e-6)
    slope = (y[3] - y[1]) / 2
    curve = (slope - (y[1] - y[0])) / 2 if order == 2 else 0 * slope
    torch.testing.assert_close(y[4], y[3] + slope + curve / 2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y[5], y[3] + slope * 2 + curve * 2, rtol=1e-5, atol=1e-6)


def test_interleaved_contexts_keep_their_own_factors(streams_registry: Any) -> None:
    model = PairNet()
    handle = _cache(model, streams_registry, max_order=2, **SKIPPING)
    alone = {name: _loop(model, name, handle, seed) for name, seed in (("a", 1), ("b", 2))}
    handle.finish(["a", "b"])
    g = {name: torch.Generator().manual_seed(seed) for name, seed in (("a", 1), ("b", 2))}
    state = {n: [torch.randn(2, 6, DIM, generator=g[n]), torch.randn(2, 3, DIM, generator=g[n])]
             for n in g}  # fmt: skip
    for t in torch.linspace(999, 50, STEPS):
        for name in ("a", "b"):  # a request's cond and another's, call by call
            x, text = state[name]
            with handle.context(name), torch.no_grad():
                v, w = model(x, text, t.reshape(1).expand(2))
            state[name] = [x - v / STEPS, text - w / STEPS]
    for name in ("a", "b"):
        for ours, want in zip(state[name], alone[name], strict=True):
            assert torch.equal(ours, want)
    assert handle.stats(["a"]).hits == handle.stats(["b"]).hits == STEPS - len(COMPUTED)
    assert handle.finish(["a"]).calls == STEPS
    assert handle.contexts() == ["b"]


def test_warmup_zero_computes_the_first_call(streams_registry: Any) -> None:
    """diffusers would have nothing to extrapolate from at call 0; here it computes."""
    model = BareNet()
    handle = _cache(model, streams_registry, cache_interval=3, warmup_steps=0)
    out = _loop(model, "r", handle)
    assert all(torch.isfinite(t).all() for t in out)
    # calls 0 (nothing cached yet), 1, 4, 7 compute: (step - 0 - 1) % 3 == 0
    assert handle.finish(["r"]).hits == STEPS - 4


def test_default_bfloat16_factors_stay_close(streams_registry: Any) -> None:
    reference = _loop(PairNet(), None)
    model = PairNet()
    handle = _cache(model, streams_registry, cache_interval=2, warmup_steps=2)
    ours = _loop(model, "r", handle)
    assert 0 < handle.finish(["r"]).hits < STEPS
    for a, b in zip(ours, reference, strict=True):
        assert not torch.equal(a, b)
        torch.testing.assert_close(a, b, rtol=0.1, atol=0.1)


def test_remove_restores_the_uncached_model(streams_registry: Any) -> None:
    reference = _loop(BareNet(), None)
    model = BareNet()
    _cache(model, streams_registry, **SKIPPING).remove()
    for a, b in zip(_loop(model, None), reference, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"cache_interval": 0}, "cache_interval: must be >= 1"),
        ({"warmup_steps": -1}, "warmup_steps: must be >= 0"),
        ({"max_order": -1}, "max_order: must be >= 0"),
        ({"cache_interval": "often"}, "cache_interval: expected int"),
        ({"factors_dtype": "float7"}, "unknown dtype"),
        ({"interval": 2}, "unknown option"),
        ({"lite": True}, r"lite mode .* hidden_states, encoder_hidden_states"),
    ],
)
def test_bad_options_are_config_errors(options: dict, words: str, streams_registry: Any) -> None:
    with pytest.raises(ConfigError, match=words):
        _cache(PairNet(), streams_registry, **options)
