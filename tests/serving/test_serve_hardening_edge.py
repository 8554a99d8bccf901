"""Hardening at the edge (issue 17): slow and idle clients, URL fetch deadlines, drive-by use from
web pages (Host and Origin), input-image pixel budgets before decoding, the cost budget at
admission, bounded resources under junk traffic, the drain with an image in flight, and the
error bodies in the OpenAPI document.

Most cases use one extra server per module that borrows the session server's loaded models (no
reload) with short timeouts, no API key, a small cost budget and 127.0.0.1 allowed for URLs.
"""

from __future__ import annotations

import asyncio
import base64
import io
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from .conftest import server_config
from .test_serve_hardening import _error, _png

GEN = "/v1/images/generations"
SMALL = {"model": "qwen", "prompt": "a calm lake", "size": "32x32", "num_inference_steps": 2}
HEADER_TIMEOUT, BODY_TIMEOUT, FETCH_TIMEOUT = 3.0, 2.0, 2.0
#: 32x32 x 1 frame x 4 steps x 1 output: 2 steps pass, 8 do not.
MAX_COST = 32 * 32 * 4


class SideServer:
    """A server on its own port and config, serving the session server's loaded models."""

    def __init__(self, live_server: Any, state_dir: Path, **overrides: Any) -> None:
        import uvicorn

        from omni_core.serving import create_app
        from omni_core.serving.connections import uvicorn_options

        ids = [i for i in ("qwen", "qwen-edit", "wan") if live_server.has(i)]
        models = [{"id": i, "path": str(live_server.checkpoints.paths[i])} for i in ids]
        self.config = server_config(
            live_server.checkpoints, state_dir, models=models, warmup=False, **overrides
        )
        preloaded = {i: live_server.state.models[i].omni for i in ids}
        self.app = create_app(self.config, preloaded=preloaded)
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=self.config.port,
                log_level="warning",
                **uvicorn_options(self.config),
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.port = self.config.port
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("side server not healthy")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def side(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideServer]:
    live_server.need("qwen")
    server = SideServer(
        live_server,
        tmp_path_factory.mktemp("side-state"),
        api_key=None,
        header_timeout_s=HEADER_TIMEOUT,
        body_timeout_s=BODY_TIMEOUT,
        url_fetch_timeout_s=FETCH_TIMEOUT,
        allowed_url_hosts=("127.0.0.1",),
        max_cost=MAX_COST,
    )
    yield server
    server.stop()


# -- the OpenAPI document ------------------------------------------------------------------------


def test_serve_openapi_documents_the_error_bodies(http) -> None:
    schema = http.get("/openapi.json").json()
    error = schema["components"]["schemas"]["ErrorResponse"]
    assert error["properties"]["error"]["required"] == ["message", "type", "param", "code"]
    ref = "#/components/schemas/ErrorResponse"
    operations = [
        (path, method, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "delete")
    ]
    assert len(operations) >= 10
    for path, method, op in operations:
        responses = op["responses"]
        assert "422" not in responses, (path, method)  # never sent: validation is a 400
        for status in ("400", "404", "500", "503"):
            if (path, status) == ("/health", "503"):  # the health report itself, not an error
                assert "$ref" not in responses[status]["content"]["application/json"]["schema"]
                continue
            assert responses[status]["content"]["application/json"]["schema"]["$ref"] == ref
        if path.startswith("/v1/"):
            assert "401" in responses, (path, method)
        if method == "post":
            assert {"413", "415", "429"} <= set(responses), (path, method)


# -- slow and idle clients ----------------------------------------------------------------------


async def _hold(port: int, first: bytes, drip: bytes, every: float, limit: float) -> float:
    """Send ``first``, then one byte of ``drip`` every ``every`` seconds until the server closes
    the connection (returns the seconds it took) or ``limit`` passes (returns inf)."""
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if first:
            writer.write(first)
            await writer.drain()
        i = 0
        while time.monotonic() - t0 < limit:
            try:
                data = await asyncio.wait_for(reader.read(65536), timeout=every)
            except TimeoutError:
                data = None
            except ConnectionError:  # reset: closed as well
                return time.monotonic() - t0
            if data == b"":
                return time.monotonic() - t0
            if drip:
                try:
                    writer.write(drip[i % len(drip) : i % len(drip) + 1])
                    await writer.drain()
                except ConnectionError:
                    return time.monotonic() - t0
                i += 1
        return float("inf")
    finally:
        writer.close()


def test_serve_slow_and_idle_clients_are_disconnected(side) -> None:
    """50 slow-drip bodies, 20 slow-drip headers and 20 silent sockets are all closed by their
    deadlines, while a request at a normal pace on another connection is served."""
    port = side.port
    head = (
        f"POST /v1/images/generations HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
    ).encode()
    slow_head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Pad: {'a' * 200}\r\n"

    async def main() -> tuple[list[float], list[float], list[float], int, float]:
        limit = HEADER_TIMEOUT + BODY_TIMEOUT + 8
        bodies = [_hold(port, head, b'{"prompt": "', 0.25, limit) for _ in range(50)]
        headers = [_hold(port, b"", slow_head.encode(), 0.25, limit) for _ in range(20)]
        silent = [_hold(port, b"", b"", 0.5, limit) for _ in range(20)]
        tasks = [asyncio.ensure_future(c) for c in (*bodies, *headers, *silent)]
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(base_url=side.url, timeout=30) as client:
            t0 = time.monotonic()
            ok = await client.get("/v1/models")
            served = time.monotonic() - t0
        done = await asyncio.gather(*tasks)
        return done[:50], done[50:70], done[70:], ok.status_code, served

    bodies, headers, silent, status, served = asyncio.run(main())
    assert status == 200 and served < 5, (status, served)
    # Each is closed after its deadline (a little scheduling slack), none is held open.
    assert all(BODY_TIMEOUT - 0.3 < t < BODY_TIMEOUT + 4 for t in bodies), bodies
    assert all(HEADER_TIMEOUT - 0.3 < t < HEADER_TIMEOUT + 4 for t in headers), headers
    assert all(HEADER_TIMEOUT - 0.3 < t < HEADER_TIMEOUT + 4 for t in silent), silent


def test_serve_connection_cap_answers_json_503(live_server, tmp_path) -> None:
    """Over --max-connections a request gets the JSON 503 with Retry-After, and once the idle
    sockets go, requests are served again."""
    live_server.need("qwen")
    server = SideServer(live_server, tmp_path, api_key=None, max_connections=4)
    try:

        async def main() -> tuple[httpx.Response, httpx.Response]:
            idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4)]
            await asyncio.sleep(0.2)
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                refused = await client.get("/v1/models")
            for _, writer in idle:
                writer.close()
            await asyncio.sleep(0.5)
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                return refused, await client.get("/v1/models")

        refused, served = asyncio.run(main())
        error = _error(refused, 503, "too_many_connections")
        assert "--max-connections" in error["message"] and refused.headers["retry-after"] == "1"
        assert served.status_code == 200
    finally:
        server.stop()


def test_serve_a_body_sent_at_a_normal_pace_is_not_cut(side) -> None:
    """Chunks well inside the deadline: the request is answered (here: 400 for the missing
    prompt), and the keep-alive connection serves the next request."""
    payload = b'{"model": "qwen", "size": "32x32"}'

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(payload), 12):
            time.sleep(0.3)
            yield payload[i : i + 12]

    with httpx.Client(base_url=side.url, timeout=30) as client:
        response = client.post(
            GEN,
            content=chunks(),
            headers={"Content-Type": "application/json", "Content-Length": str(len(payload))},
        )
        _error(response, 400, "missing_required_parameter")
        assert client.get("/v1/models").status_code == 200


# -- URL fetches --------------------------------------------------------------------------------


class SlowImageServer:
    """A real HTTP server on 127.0.0.1 that sends a PNG one byte a second."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.body = _png((8, 8))
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
                + f"Content-Length: {len(self.body)}\r\n\r\n".encode()
            )
            try:
                for byte in self.body:
                    conn.sendall(bytes([byte]))
                    time.sleep(1.0)
            except OSError:
                self.closed.set()  # the client gave up: the deadline held

    def close(self) -> None:
        self.sock.close()


def test_serve_url_fetch_has_a_total_deadline(side) -> None:
    slow = SlowImageServer()
    try:
        url = f"http://127.0.0.1:{slow.port}/img.png"
        body = {"model": "wan", "prompt": "x", "size": "32x32", "num_frames": 5}
        t0 = time.monotonic()
        response = httpx.post(f"{side.url}/v1/videos", json={**body, "input_reference": url})
        took = time.monotonic() - t0
        error = _error(response, 400, "url_fetch_failed")
        assert f"{FETCH_TIMEOUT:g} s" in error["message"] and error["param"] == "input_reference"
        assert FETCH_TIMEOUT - 0.2 < took < FETCH_TIMEOUT + 3, took
        assert slow.closed.wait(5)
    finally:
        slow.close()


# -- drive-by use from web pages ----------------------------------------------------------------


def test_serve_host_header_is_checked_when_bound_to_loopback(side, live_server) -> None:
    with httpx.Client(base_url=side.url, timeout=30) as client:
        for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example", "10.0.0.1"):
            response = client.get("/v1/models", headers={"Host": host})
            _error(response, 421, "invalid_host")
            assert client.get("/health", headers={"Host": host}).status_code == 421
        for host in (f"localhost:{side.port}", f"127.0.0.1:{side.port}", "[::1]", "localhost"):
            assert client.get("/v1/models", headers={"Host": host}).status_code == 200, host
    headers = {"Authorization": f"Bearer {live_server.api_key}", "Host": "rebound.example"}
    _error(httpx.get(f"{live_server.url}/v1/models", headers=headers), 421, "invalid_host")
    # An app another server runs (behind a proxy on another address) can turn it off.
    from omni_core.serving.config import ServerConfig
    from omni_core.serving.guards import BrowserGuardMiddleware

    config = ServerConfig(models=[{"id": "m", "path": "p"}], loopback_host_check=False)
    scope = {"method": "GET", "headers": [(b"host", b"serve.example:8000")]}
    assert BrowserGuardMiddleware(None, config).refusal(scope) is None


def test_serve_cross_origin_form_posts_are_refused_without_a_key(side, live_server) -> None:
    form = {"model": "wan", "prompt": "a drive-by video", "size": "32x32"}
    own = f"http://127.0.0.1:{side.port}"
    with httpx.Client(base_url=side.url, timeout=30) as client:
        for headers in (
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Origin": f"http://localhost:{side.port + 1}"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site", "Origin": own},
        ):
            response = client.post("/v1/videos", data=form, headers=headers)
            error = _error(response, 403, "cross_origin_request")
            assert error["type"] == "permission_error"
            _error(client.delete("/v1/videos/x", headers=headers), 403, "cross_origin_request")
        # A browser on the server's own page, or no browser at all, reaches validation.
        for headers in ({"Origin": own, "Sec-Fetch-Site": "same-origin"}, {}):
            response = client.post("/v1/videos", data={"size": "32x32"}, headers=headers)
            _error(response, 400, "missing_required_parameter")
        # JSON routes take JSON only: text/plain (a simple cross-origin request) is never parsed.
        response = client.post(
            GEN, content=b'{"prompt": "x"}', headers={"Content-Type": "text/plain"}
        )
        _error(response, 415, "unsupported_media_type")
    # With an API key the key protects the server: the Origin is not what decides.
    headers = {"Authorization": f"Bearer {live_server.api_key}", "Origin": "https://app.example"}
    response = httpx.post(
        f"{live_server.url}/v1/videos", data={"size": "32x32"}, headers=headers, timeout=30
    )
    _error(response, 400, "missing_required_parameter")


# -- input images: pixel budget before decoding, data URL sizes, text URLs in forms -------------


def test_serve_url_and_data_url_images_are_held_to_the_pixel_budget(
    live_server, http, monkeypatch
) -> None:
    """Images from data URLs (and fetched URLs) are checked from their headers like uploads:
    a few KB that decode to 81 megapixels are refused before anything is decoded."""
    from omni_core.serving import media

    live_server.need("qwen-edit")
    decoded: list[str] = []
    real = media.decode_image
    monkeypatch.setattr(media, "decode_image", lambda d, p="image": decoded.append(p) or real(d, p))
    bomb = _png((9000, 9000), mode="1")
    assert len(bomb) < 100_000
    url = "data:image/png;base64," + base64.b64encode(bomb).decode()
    chat = {
        "model": "qwen-edit",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
    }
    error = _error(http.post("/v1/chat/completions", json=chat), 413, "image_too_large")
    assert "--max-upload-pixels" in error["message"] and error["param"] == "image_url[0]"
    if live_server.has("wan"):
        video = {"model": "wan", "prompt": "x", "size": "32x32", "input_reference": url}
        _error(http.post("/v1/videos", json=video), 413, "image_too_large")
    assert decoded == []


def test_serve_json_data_url_input_reference_is_capped_by_the_upload_limit(
    live_server, http
) -> None:
    live_server.need("wan")
    body = {"model": "wan", "prompt": "x", "size": "32x32", "num_frames": 5}
    # ~1.5 MB of base64 (the session server allows 1 MB files): the message names the limit.
    big = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + bytes(1_100_000)).decode()
    error = _error(http.post("/v1/videos", json={**body, "input_reference": big}), 413)
    assert error["code"] == "file_too_large" and "--max-upload-mb" in error["message"], error
    assert "characters" not in error["message"]
    # A 300 KB image (over 100,000 characters of base64) within the limit is taken.
    noise = Image.frombytes("RGB", (320, 320), random.Random(0).randbytes(320 * 320 * 3))
    buf = io.BytesIO()
    noise.save(buf, format="PNG")
    assert len(buf.getvalue()) > 100_000
    ok = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    response = http.post(
        "/v1/videos", json={**body, "input_reference": ok, "num_inference_steps": 2}
    )
    assert response.status_code == 200, response.text
    http.delete(f"/v1/videos/{response.json()['id']}")


def test_serve_text_url_in_a_multipart_input_reference_is_used(live_server, http) -> None:
    """A text ``input_reference`` in a form is a URL like in JSON (never dropped): here the
    host is not allowed, so it is a 400 naming the field."""
    live_server.need("wan")
    form = {
        "model": "wan",
        "prompt": "x",
        "size": "32x32",
        "input_reference": "https://a.example/i.png",
    }
    error = _error(http.post("/v1/videos", data=form), 400, "url_fetch_disabled")
    assert error["param"] == "input_reference"


def test_serve_pillow_opens_only_the_formats_the_error_names(live_server, http) -> None:
    live_server.need("qwen-edit")
    for fmt in ("TIFF", "ICO", "PPM", "BMP", "GIF"):
        buf = io.BytesIO()
        Image.new("RGB", (16, 16)).save(buf, format=fmt)
        files = {"image": (f"x.{fmt.lower()}", buf.getvalue(), "application/octet-stream")}
        response = http.post(
            "/v1/images/edits", data={"model": "qwen-edit", "prompt": "x"}, files=files
        )
        error = _error(response, 400, "invalid_image")
        assert "png, jpeg or webp" in error["message"], fmt


# -- the cost budget at admission ---------------------------------------------------------------


def test_serve_cost_budget_is_checked_at_admission(side) -> None:
    with httpx.Client(base_url=side.url, timeout=120) as client:
        assert client.post(GEN, json=SMALL).status_code == 200
        response = client.post(GEN, json={**SMALL, "num_inference_steps": 8})
        error = _error(response, 400, "limit_exceeded")
        assert "--max-cost" in error["message"] and f"{MAX_COST:,}" in error["message"], error
        response = client.post(GEN, json={**SMALL, "n": 3})
        _error(response, 400, "limit_exceeded")
    assert side.app.state.omni.models["qwen"].engine.running_count == 0


def test_serve_default_cost_budget_passes_standard_requests() -> None:
    from omni_core.contract.requests import request_cost
    from omni_core.contract.types import GenerationRequest
    from omni_core.serving.config import DEFAULT_MAX_COST

    def cost(w: int, h: int, frames: int | None, steps: int, n: int = 1) -> int:
        gen = GenerationRequest(
            prompt="x",
            width=w,
            height=h,
            num_frames=frames,
            num_inference_steps=steps,
            num_outputs=n,
        )
        value = request_cost(gen)
        assert value is not None
        return value

    assert cost(1280, 720, 241, 50) <= DEFAULT_MAX_COST  # Wan, its longest standard clip
    assert cost(1280, 704, 121, 50) <= DEFAULT_MAX_COST  # Wan2.2-TI2V-5B
    assert cost(2048, 2048, None, 50, 4) <= DEFAULT_MAX_COST  # Qwen-Image, largest size, n=4
    assert cost(2048, 2048, 241, 50) > DEFAULT_MAX_COST  # every other limit passes this one


# -- bounded resources ---------------------------------------------------------------------------


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def _junk(port: int, count: int, conns: int) -> list[int]:
    """``count`` requests with made-up methods, pipelined over ``conns`` connections."""

    async def one(n: int, offset: int) -> list[int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(n):
            writer.write(
                f"JUNK{offset + i} /v1/models/{offset + i} HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\n\r\n".encode()
            )
        await writer.drain()
        statuses: list[int] = []
        buf = b""
        while len(statuses) < n:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=60)
            if not chunk:
                break
            buf += chunk
            while True:
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if not sep:
                    break
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(rest) < length:
                    break
                statuses.append(int(head.split(b" ", 2)[1]))
                buf = rest[length:]
        writer.close()
        return statuses

    per = count // conns
    results = await asyncio.gather(*(one(per, k * per) for k in range(conns)))
    return [s for r in results for s in r]


def test_serve_idle_connections_and_junk_methods_stay_bounded(side) -> None:
    """3,000 made-up-method requests, then 1,000 idle connections: RSS grows by under 64 MB,
    /metrics stays under 64 KB with no new series per method or path, /health answers in under
    100 ms while the sockets are open, and the idle sockets are closed by the header deadline."""
    with httpx.Client(base_url=side.url, timeout=30) as client:
        client.get("/health")
        before_metrics = client.get("/metrics").text
    rss0 = _rss_mb()
    statuses = asyncio.run(_junk(side.port, 3000, 10))
    assert len(statuses) == 3000 and set(statuses) <= {404, 405}, set(statuses)

    async def idle_and_probe() -> tuple[list[float], list[float], str]:
        opened = await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", side.port) for _ in range(1000))
        )
        t0 = time.monotonic()
        probes: list[float] = []
        async with httpx.AsyncClient(base_url=side.url, timeout=30) as client:
            for _ in range(20):
                t = time.monotonic()
                assert (await client.get("/health")).status_code == 200
                probes.append(time.monotonic() - t)
            metrics = (await client.get("/metrics")).text

        async def closed(reader: asyncio.StreamReader) -> float:
            try:
                data = await asyncio.wait_for(reader.read(1), timeout=HEADER_TIMEOUT + 10)
            except ConnectionError:
                data = b""
            assert data == b""
            return time.monotonic() - t0

        held = await asyncio.gather(*(closed(r) for r, _ in opened))
        for _, writer in opened:
            writer.close()
        return probes, held, metrics

    probes, held, metrics = asyncio.run(idle_and_probe())
    probes.sort()
    assert probes[len(probes) // 2] < 0.1 and probes[int(len(probes) * 0.9)] < 0.1, probes
    assert max(held) < HEADER_TIMEOUT + 6, max(held)
    grown = _rss_mb() - rss0
    assert grown < 64, grown
    assert len(metrics) < 64 * 1024, len(metrics)
    series = {line.split(" ")[0] for line in metrics.splitlines() if not line.startswith("#")}
    old = {line.split(" ")[0] for line in before_metrics.splitlines() if not line.startswith("#")}
    assert not any("JUNK" in s or "/v1/models/1" in s for s in series)
    assert len(series - old) <= 12, sorted(series - old)


# -- the drain with an image in flight -----------------------------------------------------------


def test_serve_drain_answers_an_image_in_flight_with_json(live_server, tmp_path) -> None:
    """SIGTERM's drain with an image request running: it gets its 200 JSON image; a request sent
    meanwhile gets the 503 JSON; the server stops within the grace period."""
    live_server.need("qwen")
    server = SideServer(live_server, tmp_path, shutdown_grace_s=60)
    try:
        state = server.app.state.omni
        result: dict[str, Any] = {}

        def long_image() -> None:
            with httpx.Client(base_url=server.url, timeout=120) as client:
                body = {**SMALL, "num_inference_steps": 40}
                result["response"] = client.post(
                    GEN, json=body, headers={"Authorization": f"Bearer {server.config.api_key}"}
                )

        sender = threading.Thread(target=long_image)
        sender.start()
        engine = state.models["qwen"].engine
        deadline = time.monotonic() + 60
        while engine.running_count == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.running_count == 1
        drain = threading.Thread(target=state.drain)
        drain.start()
        headers = {"Authorization": f"Bearer {server.config.api_key}"}
        refused = httpx.post(f"{server.url}{GEN}", json=SMALL, headers=headers, timeout=30)
        _error(refused, 503, "server_shutting_down")
        sender.join(120)
        drain.join(60)
        assert not drain.is_alive()
        response = result["response"]
        assert response.status_code == 200, response.text
        assert response.json()["data"][0]["b64_json"]
    finally:
        server.stop()
