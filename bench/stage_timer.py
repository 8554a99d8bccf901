"""Per-stage wall time for the benchmarks' profiling passes.

:class:`StageTimer` wraps methods of live objects (a runtime's stages) so that every call is
framed by device synchronisations: its wall time is then its own, not the queue's. A profiling
pass is separate from the timed levels (the syncs slow it down); ``restore`` puts the methods
back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class StageTimer:
    """Seconds spent and calls made per named stage (module doc)."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        """Time ``owner.attr`` calls as ``name`` from now on."""
        fn = getattr(owner, attr)

        def timed(*a: Any, **k: Any) -> Any:
            self.sync()
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.sync()
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t0
                self.calls[name] = self.calls.get(name, 0) + 1

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, fn))

    def clear(self) -> None:
        self.spent.clear()
        self.calls.clear()

    def restore(self) -> None:
        for owner, attr, fn in reversed(self._undo):
            setattr(owner, attr, fn)
        self._undo.clear()
