"""Spawn one worker per device; rank 0 drives, every rank runs the same program in lock-step.

The serving process (API, CLI, HTTP server) owns a :class:`ParallelLauncher`. It never joins
the process group itself: it talks to worker rank 0 over a pipe, and watches every worker's
process sentinel. Per request::

    launcher.run(payload)
      -> rank 0: program.validate(payload)        (errors return here, before any compute)
      -> rank 0 broadcasts the payload to every rank (gloo control group)
      -> every rank: program.run(payload)         (collectives inside: cfg / ulysses)
      -> rank 0's result comes back

The worker side (what each spawned process runs) is :mod:`omni_core.diffusion.distributed.worker`.
A worker that exits while serving fails every pending request with :class:`WorkerDiedError`
and marks the launcher unhealthy (``healthy`` is what ``/health`` reports); the other workers,
likely stuck in a collective, are terminated. :meth:`ParallelLauncher.close` stops the workers
(gracefully, then SIGTERM, then SIGKILL) and leaves no process behind. Workers also exit by
themselves when the serving process disappears (they watch their parent).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
import weakref
from concurrent.futures import Future
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Self

from omni_core.contract.config import ParallelConfig
from omni_core.contract.errors import OmniError
from omni_core.diffusion.distributed.errors import DistributedError, WorkerDiedError
from omni_core.diffusion.distributed.layout import validate_layout
from omni_core.diffusion.distributed.worker import (
    WorkerContext,
    WorkerProgram,
    unpack_error,
    worker_main,
)

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.platforms import Platform

__all__ = ["ParallelLauncher", "WorkerContext", "WorkerProgram", "free_port"]

log = logging.getLogger("omni.distributed")


# ------------------------------------------------------------------------------ serving side
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on ``host`` (for the process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _stop_processes(procs: list[Any], grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.0))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join(5.0)


class ParallelLauncher:
    """The serving side of a worker group. Use as a context manager or call :meth:`close`.

    The layout is validated (:func:`validate_layout`) in the constructor, before anything is
    spawned; :meth:`start` spawns ``world_size`` processes (spawn context) and waits until every
    rank reports ready (or one fails: its error is raised here).
    """

    def __init__(
        self,
        program: WorkerProgram,
        parallel: ParallelConfig | None = None,
        *,
        platform: Platform | None = None,
        device_count: int | None = None,
        num_heads: int | None = None,
        start_timeout_s: float = 900.0,
        dist_timeout_s: float = 600.0,
        request_timeout_s: float | None = None,
        **layout_checks: Any,
    ) -> None:
        if platform is None:
            from omni_core.contract.platforms import current_platform

            platform = current_platform()
        self.platform = platform
        self.layout = validate_layout(
            parallel or ParallelConfig(),
            platform=platform,
            device_count=device_count,
            num_heads=num_heads,
            **layout_checks,
        )
        self.program = program
        self.start_timeout_s = start_timeout_s
        self.dist_timeout_s = dist_timeout_s
        self.request_timeout_s = request_timeout_s
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closing = False
        self._closed = False
        self._started = False
        self._unhealthy: str | None = None
        self._listener: threading.Thread | None = None
        self._finalizer: weakref.finalize | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Self:
        import torch.multiprocessing as tmp

        if self._started:
            return self
        self._started = True
        ctx = tmp.get_context("spawn")
        world = self.layout.world_size
        port = free_port()
        init_method = f"tcp://127.0.0.1:{port}"
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        threads = max((os.cpu_count() or 1) // world, 1)
        for rank in range(world):
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=worker_main,
                args=(
                    rank,
                    self.layout,
                    self.program,
                    init_method,
                    self.platform.name,
                    child_conn,
                    os.getpid(),
                    self.dist_timeout_s,
                    threads,
                ),
                name=f"omni-worker-{rank}",
                daemon=False,  # daemons may not have children (torch.compile's workers)
            )
            proc.start()
            child_conn.close()
            self._procs.append(proc)
            self._conns.append(parent_conn)
        self._finalizer = weakref.finalize(self, _stop_processes, list(self._procs), 0.0)
        try:
            self._wait_ready()
        except BaseException:
            self._closing = True
            _stop_processes(self._procs, 0.0)
            self._close_conns()
            self._closed = True
            raise
        self._listener = threading.Thread(target=self._listen, name="omni-launcher", daemon=True)
        self._listener.start()
        return self

    def _wait_ready(self) -> None:
        waiting = dict(enumerate(self._conns))
        sentinels = {p.sentinel: rank for rank, p in enumerate(self._procs)}
        deadline = time.monotonic() + self.start_timeout_s
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistributedError(
                    f"parallel workers did not start within {self.start_timeout_s:.0f} s "
                    f"(ranks {sorted(waiting)} never reported ready)"
                )
            ready = wait(list(waiting.values()) + list(sentinels), timeout=left)
            for obj in ready:
                if obj in sentinels and sentinels[obj] in waiting:
                    rank = sentinels[obj]
                    conn = waiting[rank]
                    if conn.poll():  # it reported why before exiting
                        continue
                    code = self._procs[rank].exitcode
                    raise DistributedError(
                        f"parallel worker rank {rank} exited with code {code} during startup"
                    )
                for rank, conn in list(waiting.items()):
                    if conn is obj:
                        try:
                            kind, _, info = conn.recv()
                        except (EOFError, OSError):
                            code = self._procs[rank].exitcode
                            raise DistributedError(
                                f"parallel worker rank {rank} exited (code {code}) during startup"
                            ) from None
                        if kind == "fail":
                            err = unpack_error(info)
                            raise DistributedError(
                                f"parallel worker rank {rank} failed to start: "
                                f"{info['name']}: {info['message']}"
                            ) from err
                        del waiting[rank]

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop every worker and wait for it; pending requests fail. Idempotent."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closing = True
        with contextlib.suppress(Exception), self._send_lock:
            self._conns[0].send(("stop", None, None))
        _stop_processes(self._procs, timeout_s if self._unhealthy is None else 0.0)
        self._fail_pending(DistributedError("the parallel worker group was closed"))
        self._close_conns()
        if self._listener is not None:
            self._listener.join(5.0)
        if self._finalizer is not None:
            self._finalizer.detach()
        self._closed = True

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_conns(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.close()

    # -- state ----------------------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        """Every worker alive and the group serving (what ``/health`` reports)."""
        return self._started and not self._closed and self._unhealthy is None

    @property
    def health_reason(self) -> str | None:
        """Why the group is unhealthy (None when healthy or not started)."""
        if self._closed:
            return "closed"
        return self._unhealthy

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    # -- requests -------------------------------------------------------------------------------
    def submit(self, payload: Any, *, kind: str = "req") -> Future[Any]:
        """Send ``payload`` to the group; the future resolves to rank 0's result.

        ``kind="ask"`` sends it to rank 0 only (``WorkerProgram.answer``): questions such as
        request validation that need the loaded model but no other rank.
        """
        if not self._started:
            raise DistributedError("the parallel worker group was not started (call start())")
        if self._closed or self._closing:
            raise DistributedError("the parallel worker group is closed")
        if self._unhealthy is not None:
            raise WorkerDiedError(self._unhealthy)
        future: Future[Any] = Future()
        rid = next(self._ids)
        with self._lock:
            self._pending[rid] = future
        try:
            with self._send_lock:
                self._conns[0].send((kind, rid, payload))
        except (OSError, ValueError) as exc:
            with self._lock:
                self._pending.pop(rid, None)
            raise WorkerDiedError(self._unhealthy or f"rank 0 is unreachable: {exc}") from None
        return future

    def run(self, payload: Any, timeout_s: float | None = None, *, kind: str = "req") -> Any:
        """Submit and wait. A timeout marks the group unhealthy (a worker may be hung)."""
        from concurrent.futures import TimeoutError as FutureTimeout

        future = self.submit(payload, kind=kind)
        timeout_s = timeout_s if timeout_s is not None else self.request_timeout_s
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            reason = (
                f"a request got no answer within {timeout_s:.0f} s: a worker is hung; "
                "the parallel group was stopped"
            )
            self._mark_unhealthy(reason, kill=True)
            raise WorkerDiedError(reason) from None

    # -- listener -------------------------------------------------------------------------------
    def _listen(self) -> None:
        conns = {c: rank for rank, c in enumerate(self._conns)}
        sentinels = {p.sentinel: rank for rank, p in enumerate(self._procs)}
        while not self._closed and self._unhealthy is None:
            try:
                ready = wait(list(conns) + list(sentinels), timeout=0.5)
            except (OSError, ValueError):
                return
            for obj in ready:
                if obj in conns:
                    self._on_message(obj, conns[obj])
            dead = [sentinels[s] for s in ready if s in sentinels]
            if dead and not self._closing:
                self._mark_unhealthy(self._death_reason(dead[0]), kill=True)
                return
            if dead:
                return

    def _death_reason(self, rank: int) -> str:
        proc = self._procs[rank]
        proc.join(2.0)  # the sentinel fires as it exits: reap it to read the exit code
        code = proc.exitcode
        how = (
            f"was killed by signal {-code}"
            if code is not None and code < 0
            else (f"died with exit code {code}")
        )
        return (
            f"parallel worker rank {rank} (pid {proc.pid}) {how}; the worker group is "
            "unhealthy and must be restarted"
        )

    def _on_message(self, conn: Connection, rank: int) -> None:
        try:
            kind, rid, body = conn.recv()
        except (EOFError, OSError):
            return  # the sentinel tells why
        with self._lock:
            future = self._pending.pop(rid, None)
        if future is None or future.done():
            return
        if kind == "ok":
            future.set_result(body)
            return
        exc = unpack_error(body)
        if not isinstance(exc, OmniError):
            # A collective that failed because a peer died: report the death, not the symptom.
            sentinels = [p.sentinel for p in self._procs]
            ready = wait(sentinels, timeout=2.0)
            if ready:
                reason = self._death_reason(sentinels.index(ready[0]))
                future.set_exception(WorkerDiedError(reason))
                self._mark_unhealthy(reason, kill=True)
                return
        future.set_exception(exc)

    def _mark_unhealthy(self, reason: str, *, kill: bool) -> None:
        if self._unhealthy is None:
            self._unhealthy = reason
            log.error("%s", reason)
        self._fail_pending(WorkerDiedError(reason))
        if kill:
            _stop_processes([p for p in self._procs if p.is_alive()], 0.0)

    def _fail_pending(self, exc: BaseException) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc)
