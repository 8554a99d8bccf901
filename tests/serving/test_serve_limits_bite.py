"""Limits that bite before the work (a real server on 127.0.0.1 with the default limits):

- a request estimated to outrun the request timeout (the largest one the part limits admit:
  2048x2048 x 4 images x 200 steps) is a 400 naming ``--request-timeout`` before it queues;
- input images are held to a decoded-pixel budget read from their headers: a 64-megapixel PNG
  is refused before decoding, a JPEG above the budget is decoded reduced;
- ``/health`` (and ``/ping``) say 503 while the state folder is read-only or short of space,
  and ``omni serve`` with such a state folder fails in one ``Error:`` line;
- a client that disconnects is not logged as an ASGI error.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import WAN_SIZE, Checkpoints, LiveServer, free_port, start_server

GEN = "/v1/images/generations"
SMALL = {"model": "qwen", "prompt": "a calm lake", "size": "32x32", "num_inference_steps": 2}


@pytest.fixture(scope="module")
def server(checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Every limit at ``ServerConfig``'s default (the warm-up small, as the suite's)."""
    from omni_core.serving import ServerConfig

    ids = [i for i in ("qwen", "qwen-edit", "tts") if i in checkpoints.paths]
    if "qwen" not in ids:
        pytest.skip(f"qwen: {checkpoints.missing.get('qwen')}")
    state = tmp_path_factory.mktemp("limits-state")
    config = ServerConfig(
        models=[{"id": i, "path": str(checkpoints.paths[i])} for i in ids],
        port=free_port(),
        state_dir=state,
        warmup_request={**WAN_SIZE, "num_inference_steps": 2},
    )
    ckpts = Checkpoints(paths={i: checkpoints.paths[i] for i in ids})
    live = start_server(config, ckpts, state)
    yield live
    live.stop()


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    return error


# -- (a) a request's estimated run time ------------------------------------------------------


def test_serve_the_largest_request_the_part_limits_admit_is_refused_at_once(server) -> None:
    from omni_core.serving.config import DEFAULT_MAX_OUTPUTS, DEFAULT_MAX_STEPS

    engine = server.state.models["qwen"].engine
    assert server.state.models["qwen"].estimate.seconds_per_unit  # measured at the warm-up
    huge = {**SMALL, "size": "2048x2048", "n": DEFAULT_MAX_OUTPUTS}
    huge["num_inference_steps"] = DEFAULT_MAX_STEPS
    with server.http() as client:
        t0 = time.monotonic()
        error = _error(client.post(GEN, json=huge), 400, "limit_exceeded")
        assert time.monotonic() - t0 < 5  # refused before it queued, not after 30 minutes
        assert "--request-timeout" in error["message"] and error["param"] == "size"
        assert engine.queue_depth == 0 and engine.running_count == 0
        ok = client.post(GEN, json=SMALL)  # a standard request still passes
        assert ok.status_code == 200, ok.text


def test_serve_the_estimate_is_the_pipelines_measure_of_the_work(server, monkeypatch) -> None:
    """The server names no model: a request's work is what its pipeline says
    (``Pipeline.work_units``), times the speed measured on that model."""
    served = server.state.models["qwen"]
    pipeline = served.pipeline
    measured = served.estimate.seconds_per_unit
    assert measured
    limit = server.state.config.request_timeout_s
    with server.http() as client:
        # A pipeline that says this small request is a thousand timeouts' worth of work.
        monkeypatch.setattr(pipeline, "work_units", lambda request: 1000 * limit / measured)
        error = _error(client.post(GEN, json=SMALL), 400, "limit_exceeded")
        assert "--request-timeout" in error["message"]
        # One that gives no measure (None) is never refused for its estimate.
        monkeypatch.setattr(pipeline, "work_units", lambda request: None)
        assert client.post(GEN, json=SMALL).status_code == 200
    monkeypatch.undo()
    assert served.estimate.seconds_per_unit == measured  # nothing learned from a None


# -- (b) input images within a pixel budget --------------------------------------------------


def _encoded(size: tuple[int, int], fmt: str, mode: str = "RGB") -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new(mode, size, "white" if mode == "RGB" else 1).save(buffer, format=fmt)
    return buffer.getvalue()


def test_serve_a_64_megapixel_png_is_refused_before_decoding(server, monkeypatch) -> None:
    server.need("qwen-edit")
    from omni_core.serving import media

    decoded: list[str] = []
    real = media.decode_image
    monkeypatch.setattr(
        media, "decode_image", lambda d, p="image", **k: decoded.append(p) or real(d, p, **k)
    )
    png = _encoded((8000, 8000), "PNG", mode="1")  # 64 megapixels, a few KB
    fields = {"model": "qwen-edit", "prompt": "edit", "size": "32x32", "num_inference_steps": "2"}
    with server.http() as client:
        t0 = time.monotonic()
        response = client.post(
            "/v1/images/edits", data=fields, files={"image": ("big.png", png, "image/png")}
        )
        error = _error(response, 413, "image_too_large")
        assert time.monotonic() - t0 < 5
    assert "--max-upload-pixels" in error["message"]
    assert decoded == []


def test_serve_a_jpeg_above_the_budget_is_decoded_reduced(server, monkeypatch) -> None:
    server.need("qwen-edit")
    from omni_core.serving import media

    sizes: list[tuple[int, int]] = []
    real = media.decode_image

    def decode(data: bytes, param: str = "image", **kwargs: Any) -> Any:
        image = real(data, param, **kwargs)
        sizes.append(image.size)
        return image

    monkeypatch.setattr(media, "decode_image", decode)
    budget = server.state.config.max_upload_pixels
    jpeg = _encoded((6000, 4000), "JPEG")  # 24 megapixels: above the default budget
    assert 6000 * 4000 > budget
    fields = {"model": "qwen-edit", "prompt": "edit", "size": "32x32", "num_inference_steps": "2"}
    with server.http() as client:
        response = client.post(
            "/v1/images/edits", data=fields, files={"image": ("big.jpg", jpeg, "image/jpeg")}
        )
    assert response.status_code == 200, response.text
    assert sizes == [(3000, 2000)]  # libjpeg's 1/2 scale: within the budget


# -- (c) the state folder ----------------------------------------------------------------------


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """``folder`` refuses new files, also to root (the immutable attribute; mode 0500 for
    others)."""
    import os

    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a folder read-only here (chattr +i failed)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def _health(live: LiveServer, status: int, wait_for: Any) -> dict[str, Any]:
    import httpx

    def reached() -> Any:
        response = httpx.get(f"{live.url}/health", timeout=10)
        return response if response.status_code == status else None

    response = wait_for(reached, timeout=30, interval=0.2)
    ping = httpx.get(f"{live.url}/ping", timeout=10)
    assert ping.status_code == status and ping.content == b""
    return response.json()


def test_serve_health_is_503_while_the_state_folder_is_read_only(server, wait_for) -> None:
    with _read_only(server.state_dir):
        body = _health(server, 503, wait_for)
        assert "not writable" in body["storage"] and str(server.state_dir) not in str(body)
    _health(server, 200, wait_for)


def test_serve_health_is_503_while_the_state_folder_is_short_of_space(server, wait_for) -> None:
    storage = server.state.config.storage
    kept = storage.min_free_bytes
    storage.min_free_bytes = 2**62  # more than any disk has free
    try:
        body = _health(server, 503, wait_for)
        assert "--min-free-space" in body["storage"]
    finally:
        storage.min_free_bytes = kept
    _health(server, 200, wait_for)


@pytest.mark.parametrize("problem", ["read-only", "no space"])
def test_serve_an_unusable_state_folder_at_start_is_one_error_line(
    checkpoints, tmp_path, problem
) -> None:
    if "tts" not in checkpoints.paths:
        pytest.skip(f"tts: {checkpoints.missing.get('tts')}")
    state = tmp_path / "state"
    state.mkdir()
    cmd = [sys.executable, "-c", "from omni_core.cli import main; main()", "serve"]
    cmd += [str(checkpoints.paths["tts"]), "--state-dir", str(state), "--port", str(free_port())]
    if problem == "no space":
        cmd += ["--min-free-space", "1000000TiB"]
        context: Any = contextlib.nullcontext()
    else:
        context = _read_only(state)
    with context:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and "--state-dir" in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


# -- (d) a client that leaves ------------------------------------------------------------------


@pytest.fixture()
def asgi_errors() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.ERROR)
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def _send_and_leave(live: LiveServer, path: str, body: bytes, after_s: float) -> bytes:
    """A raw request whose client closes the connection ``after_s`` seconds later (having
    read whatever came meanwhile)."""
    port = int(live.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        sock.settimeout(after_s)
        got = b""
        with contextlib.suppress(TimeoutError):
            got = sock.recv(4096)
        time.sleep(after_s)
    return got


def test_serve_a_client_that_leaves_is_not_an_asgi_error(server, asgi_errors, wait_for) -> None:
    import json

    engine = server.state.models["qwen"].engine
    long = {**SMALL, "size": "256x256", "num_inference_steps": 150}
    _send_and_leave(server, GEN, json.dumps(long).encode(), 1.0)
    wait_for(lambda: engine.running_count == 0, timeout=60)  # cancelled, not run to its end
    if server.has("tts"):  # mid-stream: the first audio came, then the client left
        speech = {"model": "tts", "input": "Leaving early. " * 40, "stream_format": "audio"}
        got = _send_and_leave(server, "/v1/audio/speech", json.dumps(speech).encode(), 0.5)
        assert got.startswith(b"HTTP/1.1 200")
        tts = server.state.models["tts"].engine
        wait_for(lambda: tts.running_count == 0, timeout=60)
    time.sleep(0.5)
    assert [r.getMessage() for r in asgi_errors] == []
