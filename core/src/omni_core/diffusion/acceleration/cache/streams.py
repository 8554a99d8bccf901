"""Which tensors a repeated block carries from its inputs to its outputs: the *streams* a
residual cache stores and replays.

diffusers describes its own blocks with ``TransformerBlockMetadata`` (the hidden states, plus
the encoder hidden states of joint blocks, and where each sits in the output tuple). A block
with other streams, e.g. LTX-2's video and audio hidden states returned together, is declared
by its model plugin in ``DenoiserAdapter.block_streams``: the names of the forward arguments the
block returns updated, in the order of its output tuple (one name: the block returns a bare
tensor). :func:`stream_layout` turns either description into one :class:`StreamLayout`, so the
residual caches (first-block, TeaCache) store one residual per stream, TaylorSeer one set of
Taylor factors per stream, and none of them knows a model.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.diffusion.denoisers import DenoiserAdapter

#: The backends that replay (or predict) every declared stream; the others handle diffusers'
#: layouts only.
STREAM_BACKENDS: tuple[str, ...] = ("first-block", "teacache", "taylorseer")


@dataclass(frozen=True)
class StreamLayout:
    """Where a block's streams are among its arguments and in its output.

    ``names[i]`` is the forward argument of stream ``i``, ``positions[i]`` its index in the
    output tuple; ``width`` is the output tuple's length (None: a bare tensor, stream 0).
    Stream 0 is the one a first-block cache measures.
    """

    names: tuple[str, ...]
    positions: tuple[int, ...]
    width: int | None
    parameters: tuple[str, ...]

    def argument(self, name: str, args: tuple, kwargs: dict) -> Any:
        """The value of forward argument ``name`` in one call (None: not passed)."""
        if name in kwargs:
            return kwargs[name]
        index = self.parameters.index(name)
        return args[index] if index < len(args) else None

    def inputs(self, args: tuple, kwargs: dict) -> list[Any]:
        """The streams as the block received them."""
        return [self.argument(name, args, kwargs) for name in self.names]

    def outputs(self, output: Any) -> list[Any]:
        """The streams as the block returned them."""
        if not isinstance(output, tuple):
            return [output]
        return [output[p] if p < len(output) else None for p in self.positions]

    def join(self, streams: Sequence[Any]) -> Any:
        """An output shaped as the block returns it, from one tensor per stream."""
        if self.width is None:
            return streams[0]
        out: list[Any] = [None] * self.width
        for position, tensor in zip(self.positions, streams, strict=True):
            out[position] = tensor
        return tuple(out)


def stream_layout(block: Any, adapter: DenoiserAdapter) -> StreamLayout:
    """The layout of ``block``: the adapter's ``block_streams``, else diffusers' metadata."""
    from diffusers.utils.torch_utils import unwrap_module

    cls = type(unwrap_module(block))
    parameters = tuple(inspect.signature(cls.forward).parameters)[1:]  # without self
    if adapter.block_streams:
        names = tuple(adapter.block_streams)
        missing = [n for n in names if n not in parameters]
        if missing:
            raise ConfigError(
                f"{adapter.architecture}: block_streams names {', '.join(missing)}, which "
                f"{cls.__name__}.forward does not take (it takes {', '.join(parameters)})"
            )
        width = len(names) if len(names) > 1 else None
        return StreamLayout(names, tuple(range(len(names))), width, parameters)
    meta = _diffusers_metadata(cls)
    hidden = meta.return_hidden_states_index or 0
    encoder = meta.return_encoder_hidden_states_index
    if encoder is None:
        return StreamLayout((meta.hidden_states_argument_name,), (hidden,), None, parameters)
    names = (meta.hidden_states_argument_name, meta.encoder_hidden_states_argument_name)
    return StreamLayout(names, (hidden, encoder), max(hidden, encoder) + 1, parameters)


def _diffusers_metadata(cls: type) -> Any:
    """diffusers' registered metadata of a block class; unregistered: one bare hidden state."""
    from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry

    try:
        return TransformerBlockRegistry.get(cls)
    except ValueError:
        return TransformerBlockMetadata(return_hidden_states_index=0)


def refuse_declared_streams(adapter: DenoiserAdapter, backend: str) -> None:
    """Backends built on diffusers' own block handling cannot replay declared streams."""
    if adapter.block_streams:
        raise ConfigError(
            f"cache.backend: {backend!r} does not handle {adapter.architecture}'s blocks, which "
            f"return the streams {', '.join(adapter.block_streams)}; use one of "
            f"{', '.join(STREAM_BACKENDS)}"
        )


def add(streams: Sequence[Any], residuals: Sequence[Any]) -> list[Any]:
    """Each stream plus its residual (a stream or residual that is None passes through)."""
    return [s if s is None or r is None else s + r for s, r in zip(streams, residuals, strict=True)]


def subtract(outputs: Sequence[Any], inputs: Sequence[Any]) -> list[Any]:
    """The residual of each stream (None where either side is missing)."""
    return [None if o is None or i is None else o - i for o, i in zip(outputs, inputs, strict=True)]
