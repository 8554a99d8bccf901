"""What both autoregressive runtimes share: requests that join and leave a fixed set of cache
slots between steps.

:class:`SlotRuntime` owns the :class:`~omni_core.runtime.cache.SlotCache`, the queue of waiting
streams, the free slots, cancellation and deadlines (checked between steps), and one batched forward
of its decoder per step: ``decode`` for the rows in flight, ``prefill`` for the streams that join
now (one forward per prompt length, while slots are free). The speech runtime
(:class:`~omni_core.runtime.chain.ARRuntime`) and the chat runtime
(:class:`~omni_core.chat.runtime.ChatRuntime`) add what they do with each step's output.
:class:`SlotStream` is one request: deltas handed out, iterated or polled.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from omni_core.contract.errors import (
    InvalidRequestError,
    RequestCancelledError,
    RequestTimeoutError,
)
from omni_core.contract.pipeline import PolledStream, SharedRuntime

log = logging.getLogger("omni.autoregressive")

D = TypeVar("D")  # a delta handed out (AudioChunk, ChatDelta)
S = TypeVar("S", bound="SlotStream[Any]")


class SlotStream(PolledStream[D]):
    """One request in a :class:`SlotRuntime`: its deltas as they are handed out.

    Iterating it steps the runtime until the next delta is ready (the single-request path);
    the engine instead steps the runtime itself and takes ready deltas with :meth:`poll`.
    """

    def __init__(self, runtime: SlotRuntime[Any], state: Any, deadline: float | None) -> None:
        self.runtime, self.state, self.deadline = runtime, state, deadline
        self.ready: collections.deque[D] = collections.deque()
        self.finished = False
        self.error: BaseException | None = None
        self._cancel: str | None = None
        # the runtime's bookkeeping: the last step's row, rows not handed out yet, chunks out
        self.last: Any = None
        self.pending: list[Any] = []
        self.chunks = 0

    def poll(self) -> list[D]:
        """The deltas ready now (never blocks, never steps)."""
        out = list(self.ready)
        self.ready.clear()
        return out

    @property
    def done(self) -> bool:
        return self.finished or self.error is not None

    def cancel(self, reason: str = "cancelled by the client") -> None:
        """Leave at the next step boundary with a :class:`RequestCancelledError`."""
        self._cancel = reason

    def close(self) -> None:
        """Leave the runtime now (between steps); its cache slot is freed."""
        self.runtime.close(self)

    def __iter__(self) -> SlotStream[D]:
        return self

    def __next__(self) -> D:
        while True:
            if self.ready:
                return self.ready.popleft()
            if self.error is not None:
                raise self.error
            if self.finished:
                raise StopIteration
            self.runtime.step()


class SlotRuntime(SharedRuntime, Generic[S]):
    """Slots, joining and leaving, and the decoder's batched forward (module doc). Subclasses
    implement :meth:`step` and may override the ``_fit`` / ``_joined`` / ``_released`` hooks."""

    #: The request field a prompt too long for the cache is blamed on.
    prompt_param: ClassVar[str] = "input"

    def __init__(
        self,
        decoder: Any,
        cat: Callable[[list[Any]], Any],
        *,
        max_batch: int,
        max_len: int,
        device: Any,
    ) -> None:
        from omni_core.runtime.cache import SlotCache

        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.decoder, self._cat = decoder, cat
        self.max_batch, self.max_len = max_batch, max_len
        self.cache = SlotCache(max_batch, max_len, device)
        self.lock = threading.RLock()
        self._waiting: collections.deque[S] = collections.deque()
        self._active: list[S] = []
        self._free = list(range(max_batch))
        #: Steps run, rows they carried, host synchronisations (tests and benchmarks read them).
        self.steps = 0
        self.rows = 0
        self.syncs = 0

    def open(self, state: Any, *, timeout_s: float | None = None) -> S:  # pragma: no cover
        """Queue ``state``; it joins at the next step with a free slot."""
        raise NotImplementedError

    def step(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _keep(self, rows: list[S], out: Any) -> None:
        """Store each row of one step's output with its stream: fed to its next decode, and
        pending until its chunk is handed out. Subclasses then decide what is due."""
        self.steps += 1
        self.rows += len(rows)
        for i, stream in enumerate(rows):
            row = out.rows(i, i + 1)
            stream.last = row
            stream.pending.append(row)

    # -- joining and leaving -----------------------------------------------------------------

    def _queue(self, stream: S) -> S:
        with self.lock:
            self._waiting.append(stream)
        return stream

    @staticmethod
    def deadline(timeout_s: float | None) -> float | None:
        return None if timeout_s is None else time.monotonic() + timeout_s

    def close(self, stream: S) -> None:
        with self.lock:
            if stream in self._waiting:
                self._waiting.remove(stream)
            if stream in self._active:
                self._release(stream)
            if not stream.done:
                stream.error = RequestCancelledError("the stream was closed")

    @property
    def open_streams(self) -> int:
        return len(self._waiting) + len(self._active)

    def _release(self, stream: S) -> None:
        self._active.remove(stream)
        self._free.append(stream.state.slot)
        self._free.sort()
        stream.pending, stream.last = [], None
        self._released(stream)

    def _fail(self, stream: S, exc: BaseException) -> None:
        if stream in self._active:
            self._release(stream)
        elif stream in self._waiting:
            self._waiting.remove(stream)
        if stream.error is None:
            stream.error = exc

    def _drop_expired(self) -> None:
        now = time.monotonic()
        for stream in [*self._waiting, *self._active]:
            if stream._cancel is not None:
                self._fail(stream, RequestCancelledError(stream._cancel))
            elif stream.deadline is not None and now > stream.deadline:
                self._fail(stream, RequestTimeoutError("the request ran past its time limit"))

    # -- hooks -------------------------------------------------------------------------------

    def _fit(self, state: Any, length: int) -> None:
        """A joining request's prompt takes ``length`` positions: cap what it may make."""

    def _joined(self, stream: S) -> None:
        """``stream`` has its slot (``stream.state.slot``), before its prefill."""

    def _released(self, stream: S) -> None:
        """``stream`` left its slot."""

    # -- the decoder's forward ---------------------------------------------------------------

    def _forward(self, batch: list[S]) -> tuple[list[S], Any]:
        """One decode of ``batch`` and the prefills of the streams that join now: the rows that
        made an output, in order, and their outputs concatenated (None: no row)."""
        rows: list[S] = []
        outputs: list[Any] = []
        if batch:
            try:
                outputs.append(self._decode(batch))
                rows.extend(batch)
            except Exception as exc:
                log.exception("decode step failed for %d requests", len(batch))
                for stream in batch:
                    self._fail(stream, exc)
        for group in self._joining():
            out = self._prefill(group)
            if out is not None:
                outputs.append(out)
                rows.extend(group)
        return rows, (self._cat(outputs) if rows else None)

    def _decode(self, batch: list[S]) -> Any:
        cache = self.cache
        cache.bind([s.state.slot for s in batch], 1)
        last = self._cat([s.last for s in batch if s.last is not None])
        out = self.decoder.decode([s.state for s in batch], last, cache)
        cache.advance()
        return out

    def _joining(self) -> list[list[S]]:
        """Waiting streams that join now (while slots are free), grouped by prompt length:
        each group is prefilled in one forward. A prompt that cannot fit fails alone."""
        groups: dict[int, list[S]] = {}
        while self._waiting and len(self._free) > sum(len(g) for g in groups.values()):
            stream = self._waiting.popleft()
            state = stream.state
            try:
                length = self.decoder.prompt_length(state)
                if length >= self.max_len:
                    raise InvalidRequestError(
                        f"{self.prompt_param}: the prompt takes {length} positions; this model "
                        f"holds {self.max_len}",
                        param=self.prompt_param,
                    )
            except Exception as exc:  # noqa: BLE001 - this request fails alone
                self._fail(stream, exc)
                continue
            self._fit(state, length)
            groups.setdefault(length, []).append(stream)
        return list(groups.values())

    def _prefill(self, group: list[S]) -> Any:
        """Prefill prompts of one length together, each into its own slot."""
        length = self.decoder.prompt_length(group[0].state)
        for stream in group:
            stream.state.slot = self._free.pop(0)
            self._active.append(stream)
            self.cache.reset_slot(stream.state.slot)
            self._joined(stream)
        try:
            self.cache.bind([s.state.slot for s in group], length)
            out = self.decoder.prefill([s.state for s in group], self.cache)
            self.cache.advance()
            return out
        except Exception as exc:  # this group fails, the others go on
            log.exception("prefill failed for %d requests", len(group))
            for stream in group:
                self._fail(stream, exc)
            return None
