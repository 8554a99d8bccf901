"""vLLM-Omni's request fields on the image, video and speech endpoints, with bodies written from
vLLM-Omni's public docs: each field is honoured, refused with a 400 naming it, or accepted and
reported in ``X-Omni-Ignored-Fields``; adjusted values are said in ``X-Omni-Adjusted-Fields``."""

from __future__ import annotations

import base64
import io
import json

import pytest

from .conftest import QWEN_SIZE

GEN = "/v1/images/generations"
EDITS = "/v1/images/edits"
SPEECH = "/v1/audio/speech"


def _png(size: tuple[int, int] = (32, 32)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, "blue").save(buf, format="PNG")
    return buf.getvalue()


def _error(response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if param is not None:
        assert error["param"] == param, error
    return error


def test_generations_width_height_jpg_and_absolute_url(live_server, http) -> None:
    live_server.need("qwen")
    body = {
        "model": "qwen",
        "prompt": "a dragon over green mountains",
        "width": 32,
        "height": 32,
        "num_inference_steps": 2,
        "true_cfg_scale": 4.0,
        "seed": 42,
        "output_format": "jpg",
        "response_format": "url",
        "user": "someone",
    }
    response = http.post(GEN, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-omni-ignored-fields"] == "user"
    out = response.json()
    assert out["output_format"] == "jpeg"
    url = out["data"][0]["url"]
    assert url.startswith(live_server.url + "/v1/images/files/") and url.endswith(".jpeg")
    fetched = http.get(url)
    assert fetched.status_code == 200 and fetched.headers["content-type"] == "image/jpeg"


def test_generations_response_format_file(live_server, http) -> None:
    """vLLM-Omni's "file": the image itself as an attachment; a zip of them when n > 1."""
    import io
    import zipfile

    from PIL import Image

    live_server.need("qwen")
    body = {"model": "qwen", "prompt": "x", **QWEN_SIZE, "response_format": "file"}
    one = http.post(GEN, json={**body, "output_format": "webp"})
    assert one.status_code == 200, one.text
    assert one.headers["content-type"] == "image/webp"
    assert one.headers["content-disposition"].startswith("attachment; filename=")
    with Image.open(io.BytesIO(one.content)) as image:
        assert image.format == "WEBP" and image.size == (32, 32)
    two = http.post(GEN, json={**body, "n": 2})
    assert two.status_code == 200 and two.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(two.content)) as archive:
        assert archive.namelist() == ["image_0.png", "image_1.png"]
        for name in archive.namelist():
            with Image.open(io.BytesIO(archive.read(name))) as image:
                assert image.size == (32, 32)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"response_format": "zip"}, "response_format"),
        ({"width": 32}, "width"),
        ({"width": 32, "height": 32, "size": "64x64"}, "size"),
        ({"lora": {"name": "x"}}, "lora"),
        ({"num_outputs_per_prompt": 2, "n": 3}, "num_outputs_per_prompt"),
    ],
)
def test_generations_refused_fields(live_server, http, change, param) -> None:
    live_server.need("qwen")
    body = {"model": "qwen", "prompt": "x", **({} if "width" in change else QWEN_SIZE), **change}
    _error(http.post(GEN, json=body), 400, param)


def test_edits_url_inputs_default_size_and_bot_task(live_server, openai_client) -> None:
    live_server.need("qwen-edit")
    data_url = "data:image/png;base64," + base64.b64encode(_png((40, 24))).decode()
    raw = openai_client.images.with_raw_response.edit(
        image=[],
        model="qwen-edit",
        prompt="the bear wears sportswear",
        extra_body={"url": [data_url], "num_inference_steps": 2, "seed": 7, "bot_task": "edit"},
    )
    assert "bot_task" in raw.headers["x-omni-ignored-fields"]
    adjusted = raw.headers["x-omni-adjusted-fields"]
    assert adjusted.startswith("size=auto->") and "input image" in adjusted
    from PIL import Image

    result = raw.parse()
    with Image.open(io.BytesIO(base64.b64decode(result.data[0].b64_json))) as img:
        assert f"{img.size[0]}x{img.size[1]}" in adjusted


def test_edits_url_from_a_disallowed_host_is_refused(live_server, http) -> None:
    live_server.need("qwen-edit")
    fields = {"model": "qwen-edit", "prompt": "x", "url": "http://example.com/a.png"}
    error = _error(http.post(EDITS, data=fields), 400, "url")
    assert error["code"] == "url_fetch_disabled"


def test_videos_vllm_fields_round_frames(live_server, http, wait_for) -> None:
    live_server.need("wan")
    ref = "data:image/png;base64," + base64.b64encode(_png()).decode()
    form = {
        "model": "wan",
        "prompt": "a mountain lake at sunrise",
        "width": "32",
        "height": "32",
        "num_frames": "4",
        "fps": "16",
        "num_inference_steps": "2",
        "image_reference": json.dumps({"image_url": ref}),
        "video_params": json.dumps({"seed": 5}),
    }
    response = http.post("/v1/videos", data=form)
    assert response.status_code == 200, response.text
    assert response.headers["x-omni-adjusted-fields"].startswith("num_frames=4->5")
    job = response.json()
    assert job["size"] == "32x32"

    def done():
        current = http.get(f"/v1/videos/{job['id']}").json()
        return current if current["status"] in ("completed", "failed") else None

    assert wait_for(done, timeout=120)["status"] == "completed"


def test_videos_sync_returns_mp4(live_server, http) -> None:
    live_server.need("wan")
    body = {
        "model": "wan",
        "prompt": "waves",
        "width": 32,
        "height": 32,
        "num_frames": 5,
        "num_inference_steps": 2,
    }
    response = http.post("/v1/videos/sync", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "video/mp4"
    assert response.content[4:8] == b"ftyp"
    # It ran as a job of the store: listed, completed, the same MP4 at its content URL.
    video_id = response.headers["x-omni-video-id"]
    job = http.get(f"/v1/videos/{video_id}").json()
    assert job["status"] == "completed" and job["prompt"] == "waves", job
    assert http.get(f"/v1/videos/{video_id}/content").content == response.content


def test_videos_invalid_fields(live_server, http) -> None:
    live_server.need("wan")
    base = {"model": "wan", "prompt": "x", "width": 32, "height": 32, "num_frames": 5}
    _error(http.post("/v1/videos", json={**base, "num_frames": 0}), 400, "num_frames")
    _error(http.post("/v1/videos", json={**base, "video_params": "[1]"}), 400, "video_params")
    _error(http.post("/v1/videos", json={**base, "lora": "x"}), 400, "lora")


def test_speech_vllm_fields(live_server, http) -> None:
    live_server.need("tts")
    body = {
        "model": "tts",
        "input": "Hello, how are you?",
        "task_type": "CustomVoice",
        "language": "Auto",
        "response_format": "wav",
        "sample_rate": 8000,
    }
    response = http.post(SPEECH, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-omni-sample-rate"] == "8000"
    assert set(response.headers["x-omni-ignored-fields"].split(", ")) >= {"language", "task_type"}
    assert response.content[:4] == b"RIFF"
    for change, param in (
        ({"task_type": "VoiceDesign"}, "task_type"),
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),
        ({"language": "Klingon"}, None),
    ):
        response = http.post(SPEECH, json={**body, **change})
        if param is None and response.status_code == 200:
            continue  # a voice of unknown language: accepted, reported
        _error(response, 400, param or "language")


def test_speech_stream_true_is_sse(live_server, http) -> None:
    live_server.need("tts")
    body = {"model": "tts", "input": "Streaming speech works.", "stream": True}
    with http.stream("POST", SPEECH, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line]
    assert events[0]["type"] == "speech.audio.delta"
    assert events[-1]["type"] == "speech.audio.done"


def test_voices_has_vllm_shape(live_server, http) -> None:
    live_server.need("tts")
    out = http.get("/v1/audio/voices").json()
    assert out["voices"] and all(isinstance(v, str) for v in out["voices"])
    assert {v["id"] for v in out["data"]} == set(out["voices"])
