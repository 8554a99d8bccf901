"""Throwaway servers for tests: ``omni serve`` itself as a process (:func:`omni_serve`), and for
shared stores a PostgreSQL cluster in a temp dir and a local S3-compatible server (moto's), all on
127.0.0.1 with a free port, gone when the block ends.

They are real servers (``initdb``/``pg_ctl`` of the machine's PostgreSQL, moto's S3 over
HTTP), never in-process fakes. :func:`find_postgres` says why none can start (the caller skips
with that reason).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_postgres() -> Path | str:
    """The folder of ``initdb``/``pg_ctl``, or why there is none (a string)."""
    candidates = [shutil.which("initdb"), shutil.which("pg_ctl")]
    if all(candidates):
        return Path(candidates[0]).resolve().parent  # type: ignore[arg-type]
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "initdb").is_file() and (root / "pg_ctl").is_file():
            return root
    return "PostgreSQL's initdb and pg_ctl are not installed (apt-get install postgresql)"


@contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh cluster; yields ``postgresql://postgres@127.0.0.1:PORT/postgres``.

    As root (CI), the cluster runs as the ``postgres`` user (PostgreSQL refuses root).
    """
    bin_dir = find_postgres()
    if isinstance(bin_dir, str):
        raise RuntimeError(bin_dir)
    root = Path(tempfile.mkdtemp(prefix="omni-pg-"))
    data, port = root / "data", free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        import pwd

        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    run = {"check": True, "capture_output": True, "timeout": 120}
    options = f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c full_page_writes=off"
    try:
        subprocess.run(
            [*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
            **run,  # type: ignore[call-overload]
        )
        log = str(root / "log")
        pg_ctl = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data)]
        subprocess.run(
            [*pg_ctl, "-o", options, "-l", log, "-w", "start"],
            **run,  # type: ignore[call-overload]
        )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr.decode()[-2000:]}") from None
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1; yields its endpoint URL. Sets dummy credentials in the
    environment for the clients of this process (moto accepts any)."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "omni-test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "omni-test")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)


def make_bucket(endpoint: str, bucket: str) -> str:
    """Create ``bucket`` on the S3 server at ``endpoint``; returns its ``s3://`` store URL."""
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/omni?endpoint_url={endpoint}&region=us-east-1"


def omni_command(*args: str) -> list[str]:
    """The argv of ``omni ARGS...`` with this interpreter (no console script needed)."""
    import sys

    return [sys.executable, "-c", "from omni_core.cli import main; main()", *args]


def spawn(argv: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (a process group to stop), output appended to ``log``;
    ``env`` is added to this process's environment (``HF_HUB_OFFLINE=1`` always)."""
    full = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    return subprocess.Popen(
        argv, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=full, start_new_session=True
    )


def wait_until(what: str, predicate: Any, log: Path | None = None, timeout: float = 240) -> Any:
    """Poll ``predicate`` (errors of an HTTP client count as "not yet") until it returns
    something truthy; on timeout fail naming ``what``, with the end of ``log``."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(0.2)
    tail = log.read_text()[-4000:] if log is not None and log.exists() else ""
    raise AssertionError(f"{what}: not in time\n{tail}")


@contextmanager
def omni_serve(
    *args: str, log: Path, timeout: float = 120, stop_timeout: float = 30, **env: str
) -> Iterator[str]:
    """``omni serve ARGS...`` as a real process on 127.0.0.1 and a free port (``--port`` is added
    unless given); yields its base URL once ``/health`` answers 200, and fails at once with the
    end of ``log`` if the process exits first. The block's end sends SIGTERM (uvicorn's
    graceful shutdown), then kills it after ``stop_timeout`` s. ``env`` as in :func:`spawn`."""
    import signal

    import httpx

    argv = ["serve", *args]
    if "--port" not in args:
        argv += ["--port", str(free_port())]
    port = argv[argv.index("--port") + 1]
    process = spawn(omni_command(*argv), log, **env)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, f"omni serve exited:\n{log.read_text()[-3000:]}"
        return httpx.get(f"{url}/health", timeout=2).status_code == 200

    try:
        wait_until("omni serve healthy", healthy, log, timeout=timeout)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True)
class SpokenSession:
    """What one text-to-speech WebSocket session received, in order: JSON events (dicts) and
    audio frames (bytes) interleaved as they came."""

    messages: list[dict[str, Any] | bytes]

    @property
    def events(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if isinstance(m, dict)]

    @property
    def audio(self) -> bytes:
        return b"".join(m for m in self.messages if isinstance(m, bytes))


def speak_over_websocket(url: str, session: dict[str, Any], texts: Sequence[str]) -> SpokenSession:
    """One session of ``omni serve``'s text-to-speech WebSocket (``/v1/audio/speech/stream`` of
    the server at ``url``): a ``session.config`` with ``session``'s fields (``model``,
    ``voice``, ``response_format``, options), each text as ``input.text``, then ``input.done``;
    everything received until the server closes."""
    import asyncio
    import json

    import websockets

    async def run() -> list[dict[str, Any] | bytes]:
        messages = [
            {"type": "session.config", **session},
            *({"type": "input.text", "text": text} for text in texts),
            {"type": "input.done"},
        ]
        received: list[dict[str, Any] | bytes] = []
        ws_url = url.replace("http://", "ws://", 1) + "/v1/audio/speech/stream"
        async with websockets.connect(ws_url) as ws:
            for message in messages:
                await ws.send(json.dumps(message))
            try:
                async for item in ws:
                    received.append(item if isinstance(item, bytes) else json.loads(item))
            except websockets.ConnectionClosed:
                pass
        return received

    return SpokenSession(asyncio.run(run()))
