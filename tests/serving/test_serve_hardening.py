"""Hardening (issue 17): admission by cost with finite default limits, bad input that is a 4xx
and never a 5xx, storage failures that name no server path, and keep-alive connections that
survive a failed request.

Most cases run against the session server; the default-limit cases run a second server with
``ServerConfig``'s own defaults that borrows the session server's loaded models (no reload).
"""

from __future__ import annotations

import errno
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

GEN = "/v1/images/generations"
EDIT = "/v1/images/edits"
SPEECH = "/v1/audio/speech"
SMALL = {"model": "qwen", "prompt": "a calm lake", "size": "32x32", "num_inference_steps": 2}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error


def _client_port(response: httpx.Response) -> Any:
    return response.extensions["network_stream"].get_extra_info("client_addr")


def _png(size: tuple[int, int], mode: str = "RGB", fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size).save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def default_server(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A server with every limit at its default, borrowing the session server's models."""
    from omni_core.serving import ServerConfig

    live_server.need("qwen")
    ids = [i for i in ("qwen", "qwen-edit") if live_server.has(i)]
    state_dir = tmp_path_factory.mktemp("default-state")
    config = ServerConfig(
        models=[{"id": i, "path": str(live_server.checkpoints.paths[i])} for i in ids],
        port=_free_port(),
        state_dir=state_dir,
        warmup=False,
    )
    from omni_core.serving import create_app

    preloaded = {i: live_server.state.models[i].omni for i in ids}
    import threading

    import uvicorn

    app = create_app(config, preloaded=preloaded)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=config.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{config.port}"
    with httpx.Client(base_url=url, timeout=120) as client:
        import time

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        yield client, app
    server.should_exit = True
    thread.join(30)


# -- 1. admission by cost -----------------------------------------------------------------------


def test_serve_default_limits_are_finite() -> None:
    from omni_core.serving import ServerConfig

    config = ServerConfig(models=[{"id": "m", "path": "m"}])
    limits = config.limits
    assert limits.max_pixels == 2048 * 2048 and limits.max_steps == 200
    assert limits.max_frames == 241 and limits.max_outputs == 4
    assert limits.max_aspect_ratio == 8
    assert config.request_timeout_s is not None and config.max_upload_pixels > 0


def test_serve_default_limits_refuse_oversized_and_serve_small(default_server) -> None:
    client, app = default_server
    engine = app.state.omni.models["qwen"].engine
    assert engine.request_timeout_s == app.state.omni.config.request_timeout_s  # finite, enforced
    cases = [
        ({"size": "4096x4096"}, "size"),
        ({"n": 10}, "n"),
        ({"num_inference_steps": 1000}, "num_inference_steps"),
    ]
    for change, param in cases:
        error = _error(client.post(GEN, json={**SMALL, **change}), 400, "limit_exceeded")
        assert error["param"] == param and "limit" in error["message"]
    ok = client.post(GEN, json=SMALL)
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["data"]) == 1


def test_serve_edit_image_with_extreme_aspect_ratio_is_refused(default_server) -> None:
    client, app = default_server
    if "qwen-edit" not in app.state.omni.models:
        pytest.skip("no edit model")
    files = {"image": ("a.png", _png((2, 4096)), "image/png")}
    fields = {"model": "qwen-edit", "prompt": "edit", "num_inference_steps": "2"}
    error = _error(client.post(EDIT, data=fields, files=files), 400, "limit_exceeded")
    assert error["param"] == "size" and "aspect ratio" in error["message"]


def test_serve_upload_pixels_are_checked_before_decoding(live_server, http, monkeypatch) -> None:
    live_server.need("qwen-edit")
    from omni_core.serving import media

    decoded: list[str] = []
    original = media.decode_image
    monkeypatch.setattr(
        media,
        "decode_image",
        lambda data, param="image": decoded.append(param) or original(data, param),
    )
    limit = live_server.state.config.max_upload_pixels
    side = int((limit / 2) ** 0.5) + 16  # two of these are over the limit, one is not
    big = _png((side, side), mode="1")  # a few KB that decode to tens of megapixels
    files = [("image[]", ("a.png", big, "image/png")), ("image[]", ("b.png", big, "image/png"))]
    fields = {"model": "qwen-edit", "prompt": "edit", "size": "32x32"}
    error = _error(http.post(EDIT, data=fields, files=files), 413, "image_too_large")
    assert error["param"] == "image[1]" and "--max-upload-pixels" in error["message"]
    assert decoded == []  # refused from the headers: nothing was decoded
    tiff = {"image": ("a.tiff", _png((32, 32), fmt="TIFF"), "image/tiff")}
    _error(http.post(EDIT, data=fields, files=tiff), 400, "invalid_image")
    assert decoded == []


def test_serve_engine_deadline_stops_a_running_request_between_steps(live_server, monkeypatch):
    """A request past its timeout stops at the next step (504) and the next one runs."""
    live_server.need("qwen")
    import time

    engine = live_server.state.models["qwen"].engine
    pipeline = engine.pipeline
    original = pipeline.step
    steps: list[int] = []

    def slow(states: list[Any]) -> None:
        steps.append(len(states))
        time.sleep(0.1)
        original(states)

    monkeypatch.setattr(pipeline, "step", slow)
    monkeypatch.setattr(engine, "request_timeout_s", 0.35)
    with live_server.http() as client:
        slow_response = client.post(GEN, json={**SMALL, "num_inference_steps": 40})
        _error(slow_response, 504, "timeout")
        assert len(steps) < 10, "stopped between steps, long before its 40 steps"
        monkeypatch.setattr(engine, "request_timeout_s", None)
        assert client.post(GEN, json=SMALL).status_code == 200


# -- 2. bad input is a 4xx, and the connection stays usable --------------------------------------


def _bad_bodies(live_server: Any) -> list[tuple[str, bytes, str, int, str]]:
    json_type = "application/json"
    cases = [
        (GEN, b'{"a":' * 100_000, json_type, 400, "invalid_json"),
        (GEN, b"[" * 100_000, json_type, 400, "invalid_json"),
        (
            GEN,
            b'{"model": "qwen", "prompt": "x", "seed": ' + b"7" * 5000 + b"}",
            json_type,
            400,
            "invalid_json",
        ),
        (
            GEN,
            b'{"model": "qwen", "prompt": "x", "guidance_scale": NaN}',
            json_type,
            400,
            "invalid_json",
        ),
        (GEN, b'{"model": "qwen", "prompt": "x", "self": 1}', json_type, 400, "unknown_parameter"),
        (GEN, b'{"model": "qwen", "prompt": "x\\u0000y"}', json_type, 400, "invalid_value"),
        (GEN, b'{"model": "qwen", "prompt": "x"}', "text/plain", 415, "unsupported_media_type"),
        (
            GEN,
            b'{"model": "qwen", "prompt": "x"}',
            "application/x-www-form-urlencoded",
            415,
            "unsupported_media_type",
        ),
    ]
    if live_server.has("tts"):
        cases += [
            (SPEECH, b'{"model": "tts", "input": "a\\u0000b"}', json_type, 400, "invalid_value"),
            (
                SPEECH,
                b'{"model": "tts", "input": "hello"}',
                "text/plain",
                415,
                "unsupported_media_type",
            ),
        ]
    return cases


def test_serve_bad_bodies_are_4xx_and_keep_the_connection(live_server) -> None:
    live_server.need("qwen")
    with live_server.http() as client:
        first = client.get("/health")
        for path, body, ctype, status, code in _bad_bodies(live_server):
            response = client.post(path, content=body, headers={"content-type": ctype})
            error = _error(response, status)
            if code == "unknown_parameter":
                assert error["param"] == "self", error
            else:
                assert error["code"] == code, (path, body[:40], error)
            assert _client_port(response) == _client_port(first), "the connection was dropped"
        after = client.get("/health")
        assert after.status_code == 200 and _client_port(after) == _client_port(first)


def test_serve_internal_error_keeps_the_keep_alive_connection(live_server, monkeypatch) -> None:
    """A 500 that nothing mapped is a JSON body, and the same connection serves the next one."""
    live_server.need("qwen")
    state = live_server.state
    original = state.build_request

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    with live_server.http() as client:
        monkeypatch.setattr(state, "build_request", boom)
        failed = client.post(GEN, json=SMALL)
        error = _error(failed, 500, "internal_error")
        assert error["type"] == "server_error"
        monkeypatch.setattr(state, "build_request", original)
        ok = client.post(GEN, json=SMALL)
        assert ok.status_code == 200, ok.text
        assert _client_port(ok) == _client_port(failed)


def test_serve_unwritable_state_dir_is_503_naming_no_path(live_server, monkeypatch, tmp_path):
    """A video job whose input image cannot be saved is a 503 at submit, naming no path."""
    live_server.need("wan")
    outputs = live_server.state.outputs
    not_a_folder = tmp_path / "secret-place"
    not_a_folder.write_text("a file, not a folder")
    monkeypatch.setattr(outputs, "root", not_a_folder)
    fields = {"model": "wan", "prompt": "a fox", "size": "32x32", "num_frames": "5"}
    files = {"input_reference": ("a.png", _png((32, 32)), "image/png")}
    with live_server.http() as client:
        response = client.post("/v1/videos", data=fields, files=files)
        _error(response, 503, "storage_unavailable")
        assert "secret-place" not in response.text and str(tmp_path) not in response.text
        monkeypatch.undo()
        assert client.get("/health").status_code == 200


def test_serve_storage_errors_map_to_503_and_507_without_paths() -> None:
    from omni_core.serving.errors import from_exception

    full = from_exception(OSError(errno.ENOSPC, "No space left on device", "/srv/x/images/a.png"))
    assert full.status == 507 and full.code == "insufficient_storage"
    assert "/srv" not in full.message
    read_only = from_exception(OSError(errno.EROFS, "Read-only file system", "/srv/x/inputs"))
    assert read_only.status == 503 and "/srv" not in read_only.message
    oom = from_exception(MemoryError())
    assert oom.status == 503 and oom.code == "out_of_memory"


def test_serve_state_files_are_private(live_server) -> None:
    root = Path(live_server.state.outputs.root)
    for folder in (root, root / "videos", root / "inputs", root / "images"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert (root / "jobs.sqlite3").stat().st_mode & 0o777 == 0o600


# -- 3. configuration that says no ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        ("quantisation=fp8", "did you mean 'quantization'"),
        ("atention=sdpa", "did you mean 'attention'"),
        ("trust_remote_code=true", "never runs code"),
    ],
)
def test_serve_refuses_option_keys_that_would_be_ignored(tmp_path, option, needle) -> None:
    from click.testing import CliRunner

    from omni_core.cli import cli

    result = CliRunner().invoke(cli, ["serve", str(tmp_path), "--option", option])
    assert result.exit_code == 2, result.output
    assert needle in result.output and option.split("=")[0] in result.output


def test_serve_config_refuses_unknown_fields() -> None:
    from pydantic import ValidationError

    from omni_core.serving import ServerConfig

    with pytest.raises(ValidationError, match="max_pixel"):
        ServerConfig(models=[{"id": "m", "path": "m"}], max_pixel=10)


# -- 4. resources ---------------------------------------------------------------------------------


def test_serve_metrics_labels_are_bounded_and_running_gauge_returns_to_zero(live_server) -> None:
    live_server.need("qwen")
    with live_server.http() as client:
        for i in range(30):
            client.request(f"JUNK{i}", "/v1/models")
            client.get(f"/no/such/path/{i}")
        assert client.post(GEN, json=SMALL).status_code == 200
        text = client.get("/metrics").text
    assert "JUNK" not in text and "/no/such/path" not in text
    assert 'endpoint="other /v1/models"' in text or 'endpoint="other other"' in text
    running = [
        line for line in text.splitlines() if line.startswith('omni_running_requests{model="qwen"}')
    ]
    assert running and float(running[0].split()[-1]) == 0.0, running
