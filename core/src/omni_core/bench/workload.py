"""The workload a model plugin registers: a checkpoint to build, a request, and the reference.

A subclass is a frozen dataclass; the plugin registers an instance of it through
``omni_register_benchmarks`` (a :class:`~omni_core.contract.registry.BenchmarkSpec` whose
``implementation`` points at the instance). The runner never knows the model: it calls only
the methods below, so a third-party plugin's workload runs exactly like a shipped one::

    @dataclass(frozen=True, kw_only=True)
    class MyWorkload(Workload):
        def build_checkpoint(self, folder): ...          # write a diffusers folder
        def request(self): return {"prompt": "a cat", "height": 1024, "width": 1024, ...}
        def load_reference(self, folder, device, dtype): ...   # MyPipeline.from_pretrained
        def run_reference(self, reference, request, on_step=None): ...

Outputs are compared as uint8 frames (``[N, H, W, 3]``): :meth:`reference_frames` converts the
reference's output, :meth:`omni_frames` omni's :class:`~omni_core.GenerationResult`.
"""

from __future__ import annotations

import dataclasses
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.bench.weights import write_random_model

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.contract.types import GenerationResult

#: Called once after every denoising step (the runner's step clock); takes no arguments.
StepHook = Callable[[], None]


@dataclass(frozen=True, kw_only=True)
class Workload(ABC):
    """A benchmark workload: one checkpoint layout, one request, one reference to beat.

    ``layers`` asks :meth:`build_checkpoint` for fewer transformer blocks than the real model
    has (same widths, so per-block cost is real; ``None``: the real count). It changes the
    checkpoint, so it is part of :attr:`key`, and every result row reports it.
    """

    name: str
    description: str = ""
    #: Transformer blocks to write (None: the real count).
    layers: int | None = None
    #: dtype of the random weights written by :meth:`write_random_model` calls.
    checkpoint_dtype: str = "bfloat16"

    # -- what a plugin implements ----------------------------------------------------------
    @abstractmethod
    def build_checkpoint(self, folder: Path) -> None:
        """Write a checkpoint folder in the real diffusers layout (random weights) to ``folder``.

        ``folder`` exists and is empty; the runner builds it once per :attr:`key` and reuses it.
        """

    @abstractmethod
    def request(self) -> dict[str, Any]:
        """Keyword arguments of ``Omni.generate`` (prompt, negative_prompt, height, width,
        num_frames, num_inference_steps, guidance_scale, seed, extras...)."""

    @abstractmethod
    def load_reference(self, folder: Path, device: Any, dtype: Any) -> Any:
        """The reference pipeline (e.g. diffusers' class) loaded from ``folder`` onto ``device``."""

    @abstractmethod
    def run_reference(
        self, reference: Any, request: dict[str, Any], on_step: StepHook | None = None
    ) -> Any:
        """Run ``reference`` on ``request`` with the same seed (same noise) as omni draws.

        Call ``on_step()`` after every denoising step if the reference allows it (diffusers:
        ``callback_on_step_end=self.step_callback(on_step)``); it times the steps.
        """

    # -- defaults a plugin may override ----------------------------------------------------
    def compile_reference(self, reference: Any, *, backend: str | None = None) -> None:
        """What an expert user does: diffusers' own regional compile of each transformer."""
        kwargs = {"backend": backend} if backend else {}
        for name, component in reference.components.items():
            if name.startswith("transformer") and component is not None:
                component.compile_repeated_blocks(fullgraph=True, **kwargs)

    def reference_frames(self, output: Any) -> np.ndarray:
        """The reference's output as uint8 ``[N, H, W, 3]`` (diffusers: ``frames``/``images``)."""
        if "frames" in output:  # diffusers outputs are ordered dicts: video pipelines
            return to_uint8_frames(output["frames"][0])
        return to_uint8_frames(output["images"])

    def omni_frames(self, result: GenerationResult) -> np.ndarray:
        """omni's output as uint8 ``[N, H, W, 3]``: the video, or the images stacked."""
        if result.video is not None:
            return to_uint8_frames(result.video)
        return to_uint8_frames(result.images or [])

    # -- helpers for implementations -------------------------------------------------------
    @property
    def key(self) -> str:
        """The checkpoint folder's name under the work dir (name + layer count if reduced)."""
        return self.name if self.layers is None else f"{self.name}-{self.layers}layers"

    def with_layers(self, layers: int | None) -> Workload:
        """A copy that builds ``layers`` transformer blocks (None: this workload unchanged)."""
        if layers is None:
            return self
        return dataclasses.replace(self, layers=layers)

    def blocks(self, real: int) -> int:
        """The block count to write: :attr:`layers` if set (at most ``real``), else ``real``."""
        return real if self.layers is None else max(1, min(self.layers, real))

    @staticmethod
    def step_callback(on_step: StepHook) -> Callable[..., dict[str, Any]]:
        """A diffusers ``callback_on_step_end`` that calls ``on_step`` and changes nothing."""

        def callback(_pipe: Any, _i: int, _t: Any, tensors: dict[str, Any]) -> dict[str, Any]:
            on_step()
            return tensors

        return callback

    def write_random_model(
        self, model_cls: Any, config: Any, folder: Path, *, seed: int = 0, device: Any = None
    ) -> int:
        """Save ``model_cls(config)`` with seeded random weights in :attr:`checkpoint_dtype`.

        See :func:`omni_core.bench.weights.write_random_model`; returns the parameter count.
        """
        return write_random_model(
            model_cls, config, folder, dtype=self.checkpoint_dtype, seed=seed, device=device
        )

    @staticmethod
    def load_diffusers_pipeline(
        reference_cls: Any, folder: Path, device: Any, dtype: Any, **components: Any
    ) -> Any:
        """``reference_cls.from_pretrained(folder)`` in ``dtype`` (the keyword this diffusers
        takes), its progress bar off, on ``device``: what :meth:`load_reference` does for a
        diffusers pipeline. ``components`` are passed through (e.g. a float32 VAE)."""
        from omni_core.diffusion.diffusers_compat import dtype_kwargs

        reference = reference_cls.from_pretrained(folder, **components, **dtype_kwargs(dtype))
        reference.set_progress_bar_config(disable=True)
        return reference.to(device)

    def replace_with_random_model(
        self, folder: Path, model_cls: Any, config: Any, *, seed: int = 0
    ) -> int:
        """Swap the component in ``folder`` (a tiny builder's) for ``model_cls(config)`` with
        seeded random weights: the folder is removed first, so no stale shard or index stays
        beside the new ones. Returns the parameter count."""
        shutil.rmtree(folder, ignore_errors=True)
        return self.write_random_model(model_cls, config, folder, seed=seed)


def to_uint8_frames(value: Any) -> np.ndarray:
    """PIL images, a float array in [0, 1] or a uint8 array -> uint8 ``[N, H, W, 3]``."""
    import numpy as np

    if isinstance(value, list | tuple):
        value = np.stack([np.asarray(v) for v in value]) if value else np.zeros((0, 0, 0, 3))
    array = np.asarray(value)
    if array.dtype != np.uint8:
        array = (np.clip(array.astype(np.float64), 0.0, 1.0) * 255).round().astype(np.uint8)
    if array.ndim == 3:
        array = array[None]
    return array


__all__ = ["StepHook", "Workload", "to_uint8_frames", "write_random_model"]
