"""`omni serve` with default options (no --warmup-request, no --no-warmup) brings every pipeline
of the installed first-party packages up healthy on its tiny checkpoint (issue 34, point 1):
one real server process on 127.0.0.1 serving one tiny checkpoint of each, every model warmed
with the request its pipeline declares. (Every kind of checkpoint each pipeline loads is
validated in process: tests/test_first_party_warmups.py.)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..conftest import plugin_module

pytestmark = pytest.mark.slow  # about two minutes on two CPU cores
TINY = plugin_module("tiny_first_party")
#: Loading and warming every tiny model on a busy 2-core CPU.
HEALTH_TIMEOUT_S = 900


def test_serve_default_options_bring_every_first_party_pipeline_up(
    tiny_first_party: Callable[[Any], str], tmp_path: Path
) -> None:
    from omni_core.testing import free_port, omni_command, spawn, wait_until

    served = {
        tinies[0].label: tiny_first_party(tinies[0])
        for pipeline, tinies in TINY.TINY.items()
        if not TINY.missing(pipeline)
    }
    port, log = free_port(), tmp_path / "serve.log"
    argv = omni_command(
        "serve",
        *(f"{name}={path}" for name, path in served.items()),
        "--port",
        str(port),
        "--state-dir",
        str(tmp_path / "state"),
    )
    process = spawn(argv, log, OMNI_PLATFORM="")
    url = f"http://127.0.0.1:{port}"

    def settled() -> dict[str, Any] | None:
        assert process.poll() is None, f"omni serve exited {process.returncode}:\n{_tail(log)}"
        body = httpx.get(f"{url}/health", timeout=5).json()
        return body if "loading" not in body["models"].values() else None

    try:
        health = wait_until("every model loaded", settled, log, timeout=HEALTH_TIMEOUT_S)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)
    assert health.get("errors") is None, f"{health['errors']}\n{_tail(log)}"
    assert health["models"] == dict.fromkeys(served, "ready"), health
    assert health["status"] == "ok", health
    assert "Traceback" not in log.read_text(errors="replace"), _tail(log)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else ""
