"""Whether the state folder can take writes now: ``omni serve`` checks it before it binds a port
(one ``Error:`` line, not a traceback) and ``/health`` says 503 while it cannot (read-only,
unreachable, or below the free space it must keep), so a load balancer stops sending work
that would fail when its outputs are written."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from omni_core.contract.errors import OmniError


class StateDirError(OmniError):
    """The state folder cannot be created or written."""

    exit_code = 2


def probe(folder: Path, min_free_bytes: int) -> str | None:
    """Why ``folder`` cannot take writes now, or None: a small file is written, flushed to
    disk and removed, and the free space must be at least ``min_free_bytes``."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".omni-probe-")
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return "the state folder is full"
        return f"the state folder is not writable ({exc.strerror or type(exc).__name__})"
    if free < min_free_bytes:
        return (
            f"the state folder has {free / 2**20:.0f} MB free, below the "
            f"{min_free_bytes / 2**20:.0f} MB it must keep (--min-free-space)"
        )
    return None


def check_state_dir(folder: Path, min_free_bytes: int) -> None:
    """Create ``folder`` if needed and :func:`probe` it; a :class:`StateDirError` naming the
    folder and the flag to change it otherwise (``omni serve`` before it binds a port)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StateDirError(
            f"cannot create the state folder {folder}: {exc.strerror or exc} "
            "(choose another with --state-dir)"
        ) from None
    problem = probe(folder, min_free_bytes)
    if problem is not None:
        raise StateDirError(f"{problem}: {folder} (choose another with --state-dir)")


__all__ = ["StateDirError", "check_state_dir", "probe"]
