"""A :class:`~omni_core.runtime.GraphRunner`'s capture path on the CPU, for a plugin's tests.

Off CUDA a runner calls its step functions eagerly, so a CPU test never sees what capture
changes: the warm-up calls before a capture (a step with side effects that compound shows up
there), a captured step that replays into the same output tensors, and clones handed out.
:func:`emulate_graph_capture` makes a runner take that path with a stand-in graph whose replay
reruns the step into the captured outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.runtime.graphs import GraphRunner


class _EmulatedGraph:
    """What a captured graph does, on the CPU: a replay reruns the step into its outputs."""

    def __init__(self, fn: Callable[[], tuple[torch.Tensor, ...]], outputs: tuple) -> None:
        self.fn, self.outputs = fn, outputs

    def replay(self) -> None:
        for mine, new in zip(self.outputs, self.fn(), strict=True):
            mine.copy_(new)


def emulate_graph_capture(runner: GraphRunner) -> GraphRunner:
    """Make ``runner`` capture and replay on any device: a new key runs its step
    ``warmup + 1`` times (the warm-up calls and the capture's own), and every run of the key
    (the first one too, as on CUDA) is a replay, which reruns the step into the captured
    outputs; :attr:`GraphRunner.path` says ``cuda-graphs`` and the counters count captures
    and replays. Returns ``runner``."""

    def capture(key: Hashable, fn: Callable[[], tuple[torch.Tensor, ...]]) -> Any:
        outputs: tuple[torch.Tensor, ...] = ()
        for _ in range(runner.warmup + 1):
            outputs = runner._checked(fn())
        runner._graphs[key] = (_EmulatedGraph(fn, outputs), outputs)
        runner.captured += 1
        return runner._graphs[key]

    runner.capture = True
    runner._capture = capture  # type: ignore[method-assign]
    return runner
