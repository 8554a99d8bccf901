"""Every invalid request is a 4xx with an OpenAI-style body; a failing request fails alone."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image


def _assert_error(
    response: Any, status: int, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def _png(size: tuple[int, int] = (32, 32)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


GEN = "/v1/images/generations"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "qwen", "prompt": "x", "size": "big"}, "size", "invalid_value"),
        ({"model": "qwen", "prompt": "x", "size": "0x32"}, "size", "invalid_value"),
        ({"model": "qwen", "prompt": "x", "size": "33x32"}, None, None),  # the pipeline's rule
        ({"model": "qwen", "prompt": "x", "size": "4096x4096"}, "size", None),  # server limit
        ({"model": "qwen", "prompt": "x", "num_inference_steps": 0}, "num_inference_steps", None),
        (
            {"model": "qwen", "prompt": "x", "num_inference_steps": 100000},
            "num_inference_steps",
            None,
        ),
        ({"model": "qwen", "prompt": "x", "num_inference_steps": 51}, "num_inference_steps", None),
        ({"model": "qwen", "prompt": "x", "guidance_scale": -1}, "guidance_scale", None),
        ({"model": "qwen", "prompt": "x", "guidance_scale": 1e9}, "guidance_scale", None),
        ({"model": "qwen", "prompt": "x", "n": 0}, "n", None),
        ({"model": "qwen", "prompt": "x", "n": 11}, "n", None),
        ({"model": "qwen", "prompt": "x", "seed": -1}, "seed", None),
        ({"model": "qwen"}, "prompt", "missing_required_parameter"),
        ({"model": "qwen", "prompt": "   "}, "prompt", None),
        ({"model": "qwen", "prompt": 5}, "prompt", None),
        ({"model": "qwen", "prompt": "x", "response_format": "gif"}, "response_format", None),
        ({"model": "qwen", "prompt": "x", "not_a_knob": True}, "not_a_knob", None),
        ({"model": "qwen", "prompt": "x", "images": ["http://x"]}, "images", "unknown_parameter"),
        ({"model": "wan", "prompt": "x"}, "model", "model_not_supported"),
    ],
)
def test_serve_invalid_image_requests(live_server, http, body, param, code) -> None:
    live_server.need("qwen")
    if body.get("model") == "wan":
        live_server.need("wan")
    _assert_error(http.post(GEN, json=body), 400, param, code)


def test_serve_malformed_and_unknown(live_server, http) -> None:
    _assert_error(
        http.post(GEN, content=b'{"prompt": ', headers={"content-type": "application/json"}),
        400,
        code="invalid_json",
    )
    json_type = {"content-type": "application/json"}
    _assert_error(http.post(GEN, content=b"[1, 2]", headers=json_type), 400, code="invalid_json")
    _assert_error(http.post(GEN, content=b"\xff\xfe", headers=json_type), 400, code="invalid_json")
    _assert_error(
        http.post(GEN, json={"model": "nope", "prompt": "x"}), 404, "model", "model_not_found"
    )
    _assert_error(http.get("/v1/no/such/route"), 404)
    _assert_error(http.put("/v1/models"), 405)
    _assert_error(http.get("/v1/videos/video_missing"), 404, code="video_not_found")
    _assert_error(http.get("/v1/videos/video_missing/content"), 404)
    _assert_error(http.delete("/v1/videos/video_missing"), 404)
    _assert_error(http.get("/v1/videos", params={"limit": 0}), 400)


def test_serve_missing_model_with_several_served(live_server, http) -> None:
    if len(live_server.checkpoints.paths) < 2:
        pytest.skip("needs two models")
    live_server.need("qwen")
    live_server.need("qwen-edit")
    # Two image models: which one is ambiguous.
    _assert_error(http.post(GEN, json={"prompt": "x"}), 400, "model")


def test_serve_upload_errors(live_server, http) -> None:
    live_server.need("qwen-edit")
    url = "/v1/images/edits"
    fields = {"model": "qwen-edit", "prompt": "edit", "size": "32x32"}
    _assert_error(
        http.post(url, data=fields, files={"image": ("a.png", b"not an image", "image/png")}),
        400,
        "image",
        "invalid_image",
    )
    _assert_error(
        http.post(url, data=fields, files={"image": ("a.png", b"", "image/png")}), 400, "image"
    )
    too_big = b"\x89PNG" + b"\0" * (1024 * 1024 + 10)  # the test server allows 1 MB
    error = _assert_error(
        http.post(url, data=fields, files={"image": ("a.png", too_big, "image/png")}), 413
    )
    assert "MB" in error["message"] or "bytes" in error["message"] or "exceed" in error["message"]
    _assert_error(http.post(url, data=fields), 400, "image", "missing_required_parameter")
    _assert_error(http.post(url, json=fields), 415)
    _assert_error(
        http.post(
            url,
            data={**fields, "mask": "x"},
            files={"image": ("a.png", _png(), "image/png"), "mask": ("m.png", _png(), "image/png")},
        ),
        400,
        "mask",
    )
    _assert_error(
        http.post(
            url, data={**fields, "n": "many"}, files={"image": ("a.png", _png(), "image/png")}
        ),
        400,
        "n",
    )
    huge = b"x" * (live_server.state.config.max_body_bytes + 1)
    _assert_error(http.post(GEN, content=huge, headers={"content-type": "application/json"}), 413)


def test_serve_no_url_fetching_by_default(live_server, http) -> None:
    live_server.need("wan")
    error = _assert_error(
        http.post(
            "/v1/videos",
            json={
                "model": "wan",
                "prompt": "x",
                "input_reference": "http://169.254.169.254/latest",
            },
        ),
        400,
        "input_reference",
        "url_fetch_disabled",
    )
    assert "--allowed-url-hosts" in error["message"]
    _assert_error(
        http.post(
            "/v1/videos",
            json={"model": "wan", "prompt": "x", "input_reference": "file:///etc/passwd"},
        ),
        400,
        "input_reference",
    )
    _assert_error(
        http.post(
            "/v1/videos",
            json={"model": "wan", "prompt": "x", "input_reference": "data:image/png;base64,!!!"},
        ),
        400,
        "input_reference",
    )


def test_serve_invalid_video_and_speech_requests(live_server, http) -> None:
    if live_server.has("wan"):
        for body, param in (
            ({"model": "wan", "prompt": "x", "num_frames": 0, "size": "32x32"}, "num_frames"),
            ({"model": "wan", "prompt": "x", "num_frames": 17, "size": "32x32"}, "num_frames"),
            ({"model": "wan", "prompt": "x", "seconds": "abc"}, "seconds"),
            ({"model": "wan", "seconds": "4"}, "prompt"),
        ):
            _assert_error(http.post("/v1/videos", json=body), 400, param)
        _assert_error(
            http.post("/v1/videos", content=b"x", headers={"content-type": "text/plain"}), 415
        )
    if live_server.has("tts"):
        for body, param in (
            ({"model": "tts"}, "input"),
            ({"model": "tts", "input": ""}, "input"),
            ({"model": "tts", "input": "hi", "speed": 10}, "speed"),
            ({"model": "tts", "input": "hi", "response_format": "ogg"}, "response_format"),
            ({"model": "tts", "input": "hi", "voice": "no-such-voice"}, "voice"),
            ({"model": "tts", "input": "x" * 5000}, "input"),
            ({"model": "tts", "input": "hi", "stream_format": "websocket"}, "stream_format"),
        ):
            _assert_error(http.post("/v1/audio/speech", json=body), 400, param)


def test_serve_failure_inside_one_request_fails_only_that_request(
    live_server, http, monkeypatch
) -> None:
    """An out-of-memory error in step() fails that request alone (503 naming the limits)."""
    live_server.need("qwen")
    import torch

    pipeline = live_server.state.models["qwen"].omni.pipeline
    original = pipeline.step

    def step(states: list[Any]) -> None:
        if any(s.request.prompt == "explode" for s in states):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        original(states)

    monkeypatch.setattr(pipeline, "step", step)
    body = {"model": "qwen", "size": "32x32", "num_inference_steps": 2}
    failed = http.post(GEN, json={**body, "prompt": "explode"})
    error = _assert_error(failed, 503, code="out_of_memory")
    assert "out of memory" in error["message"] and "--max-pixels" in error["message"]
    assert error["type"] == "server_error" and failed.headers["retry-after"]
    ok = http.post(GEN, json={**body, "prompt": "a calm lake"})
    assert ok.status_code == 200, ok.text
    assert http.get("/health").status_code == 200
