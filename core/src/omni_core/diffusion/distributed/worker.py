"""The worker side of a parallel group: what each spawned process runs.

:func:`worker_main` is the process entry point: it builds the process groups, calls
:meth:`WorkerProgram.setup`, then serves payloads in lock-step (rank 0 receives them from the
serving process over a pipe, validates, and broadcasts; every rank runs them). Exceptions travel
back to the serving process as data (:func:`pack_error` / :func:`unpack_error`), so a
validation error raised in rank 0 is the same class, with the same attributes, for the caller.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from omni_core.diffusion.distributed.errors import DistributedError
from omni_core.diffusion.distributed.layout import ParallelLayout

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.platforms import Platform
    from omni_core.diffusion.distributed.groups import ParallelState


@dataclass
class WorkerContext:
    """What a worker program gets in :meth:`WorkerProgram.setup`."""

    rank: int
    layout: ParallelLayout
    device: torch.device
    platform: Platform
    state: ParallelState

    @property
    def world_size(self) -> int:
        return self.layout.world_size


class WorkerProgram:
    """What each rank runs. Subclass it at module level (it is pickled to the workers).

    ``setup`` runs once per rank after the process group exists (load the model there);
    ``validate`` runs on rank 0 only, before the payload is broadcast (raise for bad input:
    the error goes back to the caller and no rank computes anything); ``run`` runs on every
    rank with the same payload and must issue the same collectives in the same order on every
    rank; only rank 0's return value is sent back.
    """

    def setup(self, ctx: WorkerContext) -> None:
        """Load models, build groups-dependent state."""

    def validate(self, payload: Any) -> Any:
        return payload

    def answer(self, payload: Any) -> Any:
        """Rank 0 alone answers a question (no broadcast, no collective): see ``ask``."""
        raise NotImplementedError(f"{type(self).__name__} answers no questions")

    def run(self, payload: Any) -> Any:  # pragma: no cover - abstract in spirit
        raise NotImplementedError

    def close(self) -> None:
        """Free resources before the process group is destroyed."""


# ------------------------------------------------------------------------------ error transport
def pack_error(exc: BaseException, rank: int) -> dict[str, Any]:
    attrs = {key: value for key, value in vars(exc).items() if _picklable(value)}
    return {
        "module": type(exc).__module__,
        "name": type(exc).__qualname__,
        "args": [a if _picklable(a) else repr(a) for a in exc.args],
        "attrs": attrs,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "rank": rank,
    }


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001
        return False
    return True


def unpack_error(info: dict[str, Any]) -> BaseException:
    """Rebuild the worker's exception (same class, args and attributes) when importable."""
    import importlib

    try:
        cls = getattr(importlib.import_module(info["module"]), info["name"])
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise TypeError
        exc = cls.__new__(cls)
        BaseException.__init__(exc, *info["args"])
        exc.__dict__.update(info["attrs"])
    except Exception:  # noqa: BLE001
        exc = DistributedError(f"worker rank {info['rank']}: {info['name']}: {info['message']}")
    exc.__notes__ = [f"raised in parallel worker rank {info['rank']}:\n{info['traceback']}"]
    return exc


# ------------------------------------------------------------------------------ worker side
def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(3)  # the serving process is gone: never linger as an orphan


def worker_main(
    rank: int,
    layout: ParallelLayout,
    program: WorkerProgram,
    init_method: str,
    platform_name: str,
    conn: Connection,
    parent_pid: int,
    dist_timeout_s: float,
    cpu_threads: int,
) -> None:
    os.environ["OMNI_PLATFORM"] = platform_name
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(layout.world_size)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    state = None
    try:
        import torch
        import torch.distributed as dist

        from omni_core.contract.platforms import current_platform
        from omni_core.diffusion.distributed.groups import (
            destroy_parallel_state,
            init_parallel_state,
        )

        platform = current_platform()
        if platform.device_type == "cpu":
            torch.set_num_threads(cpu_threads)
            device = torch.device("cpu")
        else:
            device = platform.device(rank)
            if platform.device_type == "cuda":
                torch.cuda.set_device(device)
        state = init_parallel_state(
            layout,
            rank,
            backend=platform.dist_backend,
            device=device,
            init_method=init_method,
            timeout_s=dist_timeout_s,
        )
        program.setup(WorkerContext(rank, layout, device, platform, state))
    except BaseException as exc:
        with contextlib.suppress(Exception):
            conn.send(("fail", None, pack_error(exc, rank)))
        raise
    conn.send(("ready", None, {"pid": os.getpid(), "device": str(device)}))

    try:
        while True:
            if rank == 0:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    msg = ("stop", None, None)
                kind, rid, payload = msg
                if kind == "ask":
                    try:
                        conn.send(("ok", rid, program.answer(payload)))
                    except Exception as exc:  # noqa: BLE001 - goes back to the caller
                        conn.send(("err", rid, pack_error(exc, rank)))
                    continue
                if kind == "req":
                    try:
                        payload = program.validate(payload)
                    except Exception as exc:  # noqa: BLE001 - goes back to the caller
                        conn.send(("err", rid, pack_error(exc, rank)))
                        continue
                box: list[Any] = [(kind, rid, payload)]
            else:
                box = [None]
            dist.broadcast_object_list(box, src=0, group=state.control_group)
            kind, rid, payload = box[0]
            if kind == "stop":
                break
            try:
                result = program.run(payload)
            except Exception as exc:  # noqa: BLE001
                conn.send(("err", rid, pack_error(exc, rank)))
                continue
            if rank == 0:
                conn.send(("ok", rid, result))
    finally:
        with contextlib.suppress(Exception):
            program.close()
        with contextlib.suppress(Exception):
            destroy_parallel_state()
        conn.close()
