"""Check a parallel layout against the machine and the model before spawning anything.

Ranks are laid out cfg-major: ``rank = cfg_rank * ulysses_degree + ulysses_rank``. The ranks
that share a ``cfg_rank`` form one ulysses group (they split the sequence of one CFG branch);
the ranks that share an ``ulysses_rank`` form one cfg group (conditional vs unconditional).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.config import ParallelConfig
from omni_core.contract.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.platforms import Platform


@dataclass(frozen=True)
class ParallelLayout:
    """A validated layout: sizes and the rank arithmetic every worker agrees on."""

    cfg_parallel_size: int = 1
    ulysses_degree: int = 1

    @property
    def world_size(self) -> int:
        return self.cfg_parallel_size * self.ulysses_degree

    def cfg_rank(self, rank: int) -> int:
        return rank // self.ulysses_degree

    def ulysses_rank(self, rank: int) -> int:
        return rank % self.ulysses_degree

    def cfg_group_ranks(self) -> list[list[int]]:
        """One list per ulysses rank: the ranks holding the cond/uncond branches of one shard."""
        u = self.ulysses_degree
        return [[c * u + j for c in range(self.cfg_parallel_size)] for j in range(u)]

    def ulysses_group_ranks(self) -> list[list[int]]:
        """One list per cfg rank: the ranks splitting one branch's sequence."""
        u = self.ulysses_degree
        return [[c * u + j for j in range(u)] for c in range(self.cfg_parallel_size)]


def _as_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field}: must be an integer, got {value!r}")
    return value


def device_capacity(platform: Platform) -> int:
    """How many ranks the platform can host: one per device; on CPU, one per core."""
    if platform.device_type == "cpu":
        return max(os.cpu_count() or 1, 1)
    return platform.device_count()


def validate_layout(
    parallel: ParallelConfig | dict[str, Any] | None = None,
    *,
    cfg_parallel_size: int | None = None,
    ulysses_degree: int | None = None,
    platform: Platform | None = None,
    device_count: int | None = None,
    num_heads: int | None = None,
    supports_cfg_parallel: bool | None = None,
    supports_sequence_parallel: bool | None = None,
    model_name: str = "this pipeline",
) -> ParallelLayout:
    """Return the layout or raise :class:`ConfigError` saying what is wrong and what would work.

    ``device_count`` overrides what ``platform`` reports (tests, or a user pinning devices);
    ``num_heads`` is the denoiser's attention head count (Ulysses shards heads, so it must
    divide); ``supports_*`` are the pipeline's declared capabilities (None: not checked).
    """
    if isinstance(parallel, ParallelConfig):
        cfg, uly = parallel.cfg_parallel_size, parallel.ulysses_degree
    else:
        raw = dict(parallel or {})
        cfg = raw.get("cfg_parallel_size", 1)
        uly = raw.get("ulysses_degree", 1)
    if cfg_parallel_size is not None:
        cfg = cfg_parallel_size
    if ulysses_degree is not None:
        uly = ulysses_degree
    cfg = _as_int(cfg, "cfg_parallel_size")
    uly = _as_int(uly, "ulysses_degree")
    if cfg < 1:
        raise ConfigError(f"cfg_parallel_size: must be >= 1, got {cfg}")
    if cfg > 2:
        raise ConfigError(
            f"cfg_parallel_size: must be 1 or 2, got {cfg} (classifier-free guidance has two "
            "branches, conditional and unconditional, so at most 2 ranks can split it)"
        )
    if uly < 1:
        raise ConfigError(f"ulysses_degree: must be >= 1, got {uly}")
    layout = ParallelLayout(cfg_parallel_size=cfg, ulysses_degree=uly)
    if cfg > 1 and supports_cfg_parallel is False:
        raise ConfigError(f"cfg_parallel_size: {model_name} does not support CFG-parallel")
    if uly > 1 and supports_sequence_parallel is False:
        raise ConfigError(f"ulysses_degree: {model_name} does not support sequence parallelism")
    if num_heads is not None and num_heads % uly:
        divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
        raise ConfigError(
            f"ulysses_degree: {uly} does not divide the model's {num_heads} attention heads "
            f"(Ulysses gives each rank num_heads / ulysses_degree heads); use one of {divisors}"
        )
    if device_count is None and platform is not None:
        device_count = device_capacity(platform)
    if device_count is not None and layout.world_size > device_count:
        where = f" on platform {platform.name!r}" if platform is not None else ""
        raise ConfigError(
            f"cfg_parallel_size x ulysses_degree = {cfg} x {uly} = {layout.world_size} ranks, "
            f"but only {device_count} device(s) are available{where}; one rank needs one device"
        )
    return layout


def checkpoint_num_heads(path: str | Path, component: str = "transformer") -> int | None:
    """The denoiser's attention head count from ``<path>/<component>/config.json`` (or None).

    Read before spawning so a bad ``ulysses_degree`` is refused without loading weights.
    """
    config = Path(path) / component / "config.json"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    heads = data.get("num_attention_heads")
    return heads if isinstance(heads, int) else None
