"""The live server through the official openai client (and httpx where the client has no method)."""

from __future__ import annotations

import base64
import io
import json
import time
from typing import Any

import numpy as np
import pytest
from PIL import Image

QWEN_SIZE = "32x32"


def _png(size: tuple[int, int] = (32, 32), color: tuple[int, int, int] = (200, 30, 60)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _decode_b64_png(value: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(value))).convert("RGB")


# -- meta routes ---------------------------------------------------------------------------------


def test_serve_health_models_and_metrics(live_server, openai_client, http) -> None:
    health = http.get("/health")
    assert health.status_code == 200
    assert set(health.json()["models"]) == set(live_server.checkpoints.paths)
    assert all(status == "ready" for status in health.json()["models"].values())

    models = openai_client.models.list()
    ids = {m.id for m in models.data}
    assert ids == set(live_server.checkpoints.paths)

    metrics = http.get("/metrics")
    assert metrics.status_code == 200
    text = metrics.text
    for name in (
        "omni_queue_depth",
        "omni_running_requests",
        "omni_batch_size",
        "omni_step_seconds",
        "omni_request_latency_seconds",
        "omni_model_ready",
    ):
        assert name in text, name


def test_serve_api_key_is_enforced(live_server) -> None:
    import httpx
    import openai

    response = httpx.get(f"{live_server.url}/v1/models")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    wrong = httpx.get(f"{live_server.url}/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    for method, path in (
        ("POST", "/v1/images/generations"),
        ("POST", "/v1/videos"),
        ("GET", "/v1/videos"),
        ("POST", "/v1/audio/speech"),
        ("GET", "/v1/audio/voices"),
        ("POST", "/v1/images/edits"),
    ):
        assert httpx.request(method, live_server.url + path, json={}).status_code == 401, path
    # Health and metrics stay open for probes and scrapers.
    assert httpx.get(f"{live_server.url}/health").status_code == 200
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


# -- images --------------------------------------------------------------------------------------


def test_serve_images_generate_b64_and_url(live_server, openai_client, http) -> None:
    live_server.need("qwen")
    result = openai_client.images.generate(
        model="qwen",
        prompt="a red fox",
        size=QWEN_SIZE,
        n=2,
        extra_body={"seed": 7, "num_inference_steps": 2},
    )
    assert len(result.data) == 2
    images = [_decode_b64_png(d.b64_json) for d in result.data]
    assert all(im.size == (32, 32) for im in images)

    again = openai_client.images.generate(
        model="qwen",
        prompt="a red fox",
        size=QWEN_SIZE,
        n=1,
        extra_body={"seed": 7, "num_inference_steps": 2},
    )
    assert np.array_equal(
        np.asarray(_decode_b64_png(again.data[0].b64_json)), np.asarray(images[0])
    ), "same seed, same image"

    raw = http.post(
        "/v1/images/generations",
        headers={"x-request-id": "trace-42"},
        json={"model": "qwen", "prompt": "a fox", "size": QWEN_SIZE, "num_inference_steps": 2},
    )
    assert raw.status_code == 200 and raw.headers["x-request-id"] == "trace-42"

    by_url = openai_client.images.generate(
        model="qwen",
        prompt="a fox",
        size=QWEN_SIZE,
        response_format="url",
        extra_body={"num_inference_steps": 2},
    )
    url = by_url.data[0].url
    assert url and url.startswith(f"{live_server.url}/v1/images/files/")  # absolute (issue 14)
    content = http.get(url)
    assert content.status_code == 200 and content.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(content.content)).size == (32, 32)


def test_serve_images_edit_one_and_many(live_server, openai_client) -> None:
    live_server.need("qwen-edit")
    one = openai_client.images.edit(
        model="qwen-edit",
        image=("in.png", _png(), "image/png"),
        prompt="make it blue",
        size=QWEN_SIZE,
        extra_body={"num_inference_steps": 2, "seed": 1},
    )
    assert _decode_b64_png(one.data[0].b64_json).size == (32, 32)
    many = openai_client.images.edit(
        model="qwen-edit",
        prompt="combine them",
        size=QWEN_SIZE,
        image=[
            ("a.png", _png(color=(0, 0, 255)), "image/png"),
            ("b.png", _png(color=(0, 255, 0)), "image/png"),
        ],
        extra_body={"num_inference_steps": 2},
    )
    assert len(many.data) == 1


def test_serve_pipeline_extras_are_validated_by_the_pipeline(live_server, http) -> None:
    live_server.need("wan")
    bad = http.post(
        "/v1/videos", json={"model": "wan", "prompt": "x", "flow_shift": -1, **_wan_fields()}
    )
    assert bad.status_code == 400
    assert "flow_shift" in bad.json()["error"]["message"]
    unknown = http.post(
        "/v1/videos", json={"model": "wan", "prompt": "x", "no_such_knob": 1, **_wan_fields()}
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["param"] == "no_such_knob"
    ok = http.post(
        "/v1/videos",
        json={"model": "wan", "prompt": "x", "flow_shift": 5.0, "fps": 8, **_wan_fields(steps=1)},
    )
    assert ok.status_code == 200, ok.text


# -- videos --------------------------------------------------------------------------------------


def _wan_fields(steps: int = 2) -> dict[str, Any]:
    return {"size": "32x32", "num_frames": 5, "num_inference_steps": steps, "seed": 3}


def test_serve_video_job_lifecycle_with_openai_client(live_server, openai_client, wait_for) -> None:
    live_server.need("wan")
    job = openai_client.videos.create(
        model="wan",
        prompt="waves on a shore",
        size="32x32",
        extra_body={"num_frames": 5, "num_inference_steps": 2},
    )
    assert job.object == "video" and job.status in ("queued", "in_progress", "completed")
    assert job.size == "32x32"

    done = wait_for(
        lambda: (v := openai_client.videos.retrieve(job.id)).status == "completed" and v,
        timeout=120,
    )
    assert done.progress == 100 and done.completed_at is not None and done.error is None

    listed = openai_client.videos.list()
    assert job.id in {v.id for v in listed.data}

    content = openai_client.videos.download_content(job.id)
    data = content.read()
    assert data[4:8] == b"ftyp", "an MP4 file"
    frames = _mp4_frames(data)
    assert frames.shape[0] == 5 and frames.shape[1:3] == (32, 32)


def _mp4_frames(data: bytes) -> np.ndarray:
    import av

    with av.open(io.BytesIO(data)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def test_serve_video_with_input_reference(live_server, http, wait_for) -> None:
    """TI2V: an image as multipart upload, or as a data URL in JSON (never fetched remotely)."""
    live_server.need("wan")
    files = {"input_reference": ("ref.png", _png(), "image/png")}
    data = {
        "model": "wan",
        "prompt": "animate",
        "size": "32x32",
        "num_frames": "5",
        "num_inference_steps": "2",
        "seed": "3",
    }
    response = http.post("/v1/videos", data=data, files=files)
    assert response.status_code == 200, response.text
    by_upload = response.json()["id"]
    data_url = "data:image/png;base64," + base64.b64encode(_png()).decode()
    response = http.post(
        "/v1/videos",
        json={
            **{k: v for k, v in data.items() if k != "num_frames"},
            "num_frames": 5,
            "input_reference": {"image_url": data_url},
        },
    )
    assert response.status_code == 200, response.text
    by_url = response.json()["id"]
    other = http.post(
        "/v1/videos",
        data=data,
        files={"input_reference": ("o.png", _png(color=(0, 0, 255)), "image/png")},
    ).json()["id"]
    for video_id in (by_upload, by_url, other):
        wait_for(lambda v=video_id: http.get(f"/v1/videos/{v}").json()["status"] == "completed")
        assert (live_server.state_dir / "inputs" / f"{video_id}.png").is_file()
    a = _mp4_frames(http.get(f"/v1/videos/{by_upload}/content").content)
    b = _mp4_frames(http.get(f"/v1/videos/{by_url}/content").content)
    assert a.shape == (5, 32, 32, 3)
    c = _mp4_frames(http.get(f"/v1/videos/{other}/content").content)
    same = np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()
    different = np.abs(a.astype(np.int16) - c.astype(np.int16)).mean()
    assert different > 2.0, "the image is used"
    # Upload and data URL deliver the same conditioning image to the pipeline...
    inputs = live_server.state_dir / "inputs"
    assert np.array_equal(
        np.asarray(Image.open(inputs / f"{by_upload}.png")),
        np.asarray(Image.open(inputs / f"{by_url}.png")),
    )
    # ...and so the same video, up to rounding: the two requests may share steps with different
    # batch companions (float rounding differs by batch shape), and H.264 turns a +-1 difference
    # of random-weight noise into a mean of ~4, so the bound is relative to another image's video.
    assert same < different, (same, different)


def test_serve_video_cancel_within_a_step(live_server, http, wait_for, monkeypatch) -> None:
    live_server.need("wan")
    pipeline = live_server.state.models["wan"].engine.pipeline
    original = pipeline.step

    def slow_step(states: list[Any]) -> None:  # 50 steps take >= 1 s: time to cancel
        time.sleep(0.02)
        original(states)

    monkeypatch.setattr(pipeline, "step", slow_step)
    job = http.post(
        "/v1/videos", json={"model": "wan", "prompt": "a long one", **_wan_fields(steps=50)}
    ).json()
    wait_for(lambda: http.get(f"/v1/videos/{job['id']}").json()["progress"] > 0, timeout=120)
    t0 = time.perf_counter()
    cancelled = http.delete(f"/v1/videos/{job['id']}")
    elapsed = time.perf_counter() - t0
    assert cancelled.status_code == 200
    body = cancelled.json()
    assert body["status"] == "cancelled" and body["deleted"] is False
    record = http.get(f"/v1/videos/{job['id']}").json()
    assert record["status"] == "cancelled" and record["progress"] < 100
    assert record["error"]["code"] == "cancelled"
    assert elapsed < 30
    assert http.get(f"/v1/videos/{job['id']}/content").status_code == 409
    # A finished (here: cancelled) job is deleted by a second DELETE.
    gone = http.delete(f"/v1/videos/{job['id']}")
    assert gone.json()["deleted"] is True
    assert http.get(f"/v1/videos/{job['id']}").status_code == 404


# -- speech --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac", "pcm"])
def test_serve_speech_formats(live_server, openai_client, fmt: str) -> None:
    live_server.need("tts")
    response = openai_client.audio.speech.create(
        model="tts", input="hello world", voice=_voice(live_server), response_format=fmt
    )
    data = response.read()
    assert len(data) > 100
    if fmt == "wav":
        assert data[:4] == b"RIFF"
    elif fmt == "flac":
        assert data[:4] == b"fLaC"
    elif fmt == "mp3":
        assert data[:3] == b"ID3" or data[0] == 0xFF


def test_serve_speech_without_a_format_is_the_servers_default(live_server, openai_client) -> None:
    """No response_format (the openai SDK then sends none): wav, vLLM-Omni's default, which its
    clients save as .wav; ``--speech-format mp3`` gives OpenAI's default instead."""
    live_server.need("tts")
    config = live_server.state.config
    assert config.speech_format == "wav"
    response = openai_client.audio.speech.create(
        model="tts", input="hello world", voice=_voice(live_server)
    )
    assert response.response.headers["content-type"] == "audio/wav"
    assert response.read()[:4] == b"RIFF"
    object.__setattr__(config, "speech_format", "mp3")  # what --speech-format mp3 sets
    try:
        response = openai_client.audio.speech.create(
            model="tts", input="hello world", voice=_voice(live_server)
        )
    finally:
        object.__setattr__(config, "speech_format", "wav")
    data = response.read()
    assert response.response.headers["content-type"] == "audio/mpeg"
    assert data[:3] == b"ID3" or data[0] == 0xFF


def _voice(live_server) -> str:
    voices = live_server.state.models["tts"].omni.pipeline.voices()
    return voices[0].id if voices else "default"


def test_serve_speech_streaming_pcm_matches_whole(live_server, openai_client) -> None:
    live_server.need("tts")
    voice = _voice(live_server)
    whole = openai_client.audio.speech.create(
        model="tts",
        input="streaming speech works",
        voice=voice,
        response_format="pcm",
        extra_body={"seed": 5},
    ).read()
    chunks = []
    with openai_client.audio.speech.with_streaming_response.create(
        model="tts",
        input="streaming speech works",
        voice=voice,
        response_format="pcm",
        stream_format="audio",
        extra_body={"seed": 5},
    ) as response:
        assert response.headers["content-type"].startswith("audio/pcm")
        for chunk in response.iter_bytes():
            chunks.append(chunk)
    streamed = b"".join(chunks)
    assert len(streamed) == len(whole) and streamed == whole


def test_serve_speech_sse_events(live_server, http) -> None:
    live_server.need("tts")
    events = []
    with http.stream(
        "POST",
        "/v1/audio/speech",
        json={
            "model": "tts",
            "input": "server sent events",
            "stream_format": "sse",
            "voice": _voice(live_server),
        },
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert events[-1]["type"] == "speech.audio.done"
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert deltas and all(base64.b64decode(e["audio"]) for e in deltas)
    samples = sum(len(base64.b64decode(e["audio"])) // 2 for e in deltas)
    assert abs(samples / events[-1]["sample_rate"] - events[-1]["audio_seconds"]) < 1e-6


def test_serve_voices(live_server, http) -> None:
    live_server.need("tts")
    voices = http.get("/v1/audio/voices").json()
    assert voices["object"] == "list"
    expected = {v.id for v in live_server.state.models["tts"].omni.pipeline.voices()}
    assert {v["id"] for v in voices["data"]} == expected
    # vLLM-Omni's endpoint: its status for an unknown model (sdk-docs' compatibility table)
    assert http.get("/v1/audio/voices", params={"model": "nope"}).status_code == 400
