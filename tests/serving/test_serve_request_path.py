"""The one request path, through the live server: OpenAI's ``seconds`` at the pipeline's real
frame rate, file parts /v1/images/edits does not read are refused, and the server builds its
requests itself (never through ``Omni.request``), validating each once."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

VIDEO = {"model": "wan", "prompt": "waves", "size": "32x32", "num_inference_steps": 1, "seed": 2}


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (90, 10, 200)).save(buf, format="PNG")
    return buf.getvalue()


def _mp4(data: bytes) -> tuple[int, float]:
    """(frames, frame rate) of an MP4, as a player sees them."""
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(video=0))
        return frames, float(stream.average_rate)


def _wan_fps(live_server: Any, **extras: Any) -> int:
    from omni_core import GenerationRequest

    pipeline = live_server.state.models["wan"].pipeline
    return pipeline.output_fps(GenerationRequest(prompt="x", extras=extras))


def _finished(http: Any, wait_for: Any, body: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    response = http.post("/v1/videos", json=body)
    assert response.status_code == 200, response.text
    job = response.json()
    done = wait_for(
        lambda: (j := http.get(f"/v1/videos/{job['id']}").json())["status"] == "completed" and j,
        timeout=120,
    )
    return done, http.get(f"/v1/videos/{job['id']}/content").content


@pytest.mark.parametrize(("seconds", "extras"), [("0.333333", {}), (0.5, {"fps": 8})])
def test_serve_seconds_become_frames_at_the_pipelines_fps(
    live_server, http, wait_for, seconds: Any, extras: dict[str, Any]
) -> None:
    """TI2V renders 24 fps (not the 16 the server used to assume): 1/3 s is 9 frames; an
    ``fps`` extra changes the rate, and so the frames. The job reports what the clip lasts."""
    live_server.need("wan")
    fps = _wan_fps(live_server, **extras)
    assert fps == (extras.get("fps") or 24), "the tiny checkpoint is a TI2V (24 fps) model"
    expected = round(float(seconds) * fps) + 1
    assert expected in (5, 9)  # 4k+1 and within the test server's --max-frames 9
    job, mp4 = _finished(http, wait_for, {**VIDEO, "seconds": seconds, **extras})
    frames, rate = _mp4(mp4)
    assert (frames, rate) == (expected, fps)
    assert float(job["seconds"]) == pytest.approx((frames - 1) / rate, abs=1e-6)
    assert float(job["seconds"]) == pytest.approx(float(seconds), abs=1e-6)


def test_serve_seconds_reported_for_num_frames_at_the_real_fps(live_server, http, wait_for) -> None:
    live_server.need("wan")
    job, mp4 = _finished(http, wait_for, {**VIDEO, "num_frames": 5})
    frames, rate = _mp4(mp4)
    assert frames == 5 and rate == 24
    assert float(job["seconds"]) == pytest.approx(4 / 24, abs=1e-5)  # not 4/16


def test_serve_seconds_checked_with_or_without_num_frames(live_server, http) -> None:
    live_server.need("wan")
    agree = http.post("/v1/videos", json={**VIDEO, "seconds": "0.333333", "num_frames": 9})
    assert agree.status_code == 200, agree.text
    for extra, needles in (
        ({"seconds": "1", "num_frames": 5}, ("seconds", "num_frames", "25", "5")),
        ({"seconds": "abc", "num_frames": 5}, ("seconds",)),
        ({"seconds": "0", "num_frames": 5}, ("seconds",)),
        ({"seconds": "-1"}, ("seconds",)),
        ({"seconds": "nan"}, ("seconds",)),
        ({"seconds": "120"}, ("seconds",)),
        ({"seconds": "0.25"}, ("seconds", "7 frames")),  # 7 is not 4k+1: the pipeline refuses
        ({"seconds": "1"}, ("seconds", "25")),  # 25 frames: above --max-frames 9
    ):
        response = http.post("/v1/videos", json={**VIDEO, **extra})
        assert response.status_code == 400, (extra, response.text)
        error = response.json()["error"]
        assert error["param"] == "seconds", (extra, error)
        for needle in needles:
            assert needle in error["message"], (extra, error)


def test_serve_edits_refuse_file_parts_they_do_not_read(live_server, http, openai_client) -> None:
    live_server.need("qwen-edit")
    fields = {"model": "qwen-edit", "prompt": "edit", "size": "32x32", "num_inference_steps": "2"}
    image = ("a.png", _png(), "image/png")
    for key in ("mask_image", "reference", "image2"):
        response = http.post(
            "/v1/images/edits", data=fields, files=[("image", image), (key, image)]
        )
        assert response.status_code == 400, (key, response.text)
        error = response.json()["error"]
        assert error["param"] == key and key in error["message"], error
        assert error["code"] == "unknown_parameter"
    as_text = http.post("/v1/images/edits", data={**fields, "image": "http://example.com/a.png"})
    assert as_text.status_code == 400 and as_text.json()["error"]["param"] == "image"
    # What the route does read still works: image and image[] (the openai client's names).
    ok = http.post("/v1/images/edits", data=fields, files=[("image[]", image), ("image[]", image)])
    assert ok.status_code == 200, ok.text
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        openai_client.images.edit(
            model="qwen-edit", image=image, mask=image, prompt="edit", size="32x32"
        )
    assert info.value.body["param"] == "mask"


def test_serve_builds_requests_without_omni_request(live_server, http, monkeypatch) -> None:
    """The server builds each request once through omni_core.contract.requests: ``Omni.request`` is
    not
    on its path, and the pipeline's validate runs exactly once before the operator limits."""
    live_server.need("qwen")
    from omni_core.api import Omni

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the server went through Omni.request")

    monkeypatch.setattr(Omni, "request", refuse)
    pipeline = live_server.state.models["qwen"].pipeline
    original = pipeline.validate
    calls: list[str] = []

    def validate(request: Any) -> Any:
        calls.append(request.request_id)
        return original(request)

    monkeypatch.setattr(pipeline, "validate", validate)
    body = {"model": "qwen", "prompt": "a lake", "size": "32x32", "seed": 1}
    ok = http.post(
        "/v1/images/generations",
        json={**body, "num_inference_steps": 2},
        headers={"x-request-id": "one-path"},
    )
    assert ok.status_code == 200, ok.text
    assert calls[0] == "one-path"  # request_id set when the request is built, not copied later
    calls.clear()
    over = http.post("/v1/images/generations", json={**body, "num_inference_steps": 51})
    assert over.status_code == 400 and over.json()["error"]["param"] == "num_inference_steps"
    assert len(calls) == 1


def test_serve_unknown_extra_named_like_a_shared_field(live_server, http) -> None:
    live_server.need("qwen")
    # (height alone is vLLM-Omni's field now, mapped by compat: a 400 asking for width too)
    for name, value in (("num_frames", 5), ("request_id", "x"), ("extras", {})):
        response = http.post(
            "/v1/images/generations", json={"model": "qwen", "prompt": "x", name: value}
        )
        assert response.status_code == 400, (name, response.text)
        assert response.json()["error"]["param"] == name
        assert response.json()["error"]["code"] == "unknown_parameter"
