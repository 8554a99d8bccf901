"""Timings where vLLM-Omni's serving benchmark reads them, and its ``/ping`` and ``/version``
(a real server on 127.0.0.1).

vLLM-Omni's ``benchmarks/diffusion/backends.py`` reads ``stage_durations`` and ``peak_memory_mb``
from: ``usage.peak_memory_mb`` of ``/v1/images/generations``; ``metrics`` of
``/v1/chat/completions``; the top level of the video job it polls (``GET /v1/videos/{id}``).
They are opt-in: the ``X-Omni-Timings: 1`` header, or every response with ``--report-timings``
(its flag name ``--enable-diffusion-pipeline-profiler`` too: that benchmark sends no header).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Checkpoints, LiveServer, server_config, start_server

ASK = {"X-Omni-Timings": "1"}
IMAGE = {"model": "qwen", "prompt": "a calm lake", "size": "32x32", "num_inference_steps": 2}
DIFFUSION_STAGES = {"queue", "prepare", "denoise", "decode", "encode", "total"}


def _stages(durations: dict[str, float], expected: set[str]) -> None:
    assert expected <= set(durations), durations
    assert all(isinstance(v, float) and v >= 0 for v in durations.values()), durations
    parts = sum(v for k, v in durations.items() if k in ("queue", "prepare", "denoise", "decode"))
    assert durations["total"] >= parts * 0.99  # the stages are parts of the whole


def test_serve_images_report_stage_durations_and_peak_memory_when_asked(live_server) -> None:
    live_server.need("qwen")
    with live_server.http() as client:
        plain = client.post("/v1/images/generations", json=IMAGE).json()
        assert "stage_durations" not in plain and "peak_memory_mb" not in plain["usage"]
        asked = client.post("/v1/images/generations", json=IMAGE, headers=ASK).json()
    _stages(asked["stage_durations"], DIFFUSION_STAGES)
    assert asked["stage_durations"]["denoise"] > 0
    assert asked["usage"]["peak_memory_mb"] == asked["peak_memory_mb"] >= 0.0
    assert asked["data"][0]["b64_json"]


def test_serve_edits_and_image_chat_report_their_timings(live_server) -> None:
    live_server.need("qwen-edit")
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(buffer, "PNG")
    fields = {"model": "qwen-edit", "prompt": "blue", "size": "32x32", "num_inference_steps": "2"}
    with live_server.http() as client:
        edited = client.post(
            "/v1/images/edits",
            data=fields,
            files={"image": ("a.png", buffer.getvalue(), "image/png")},
            headers=ASK,
        ).json()
        _stages(edited["stage_durations"], DIFFUSION_STAGES)
        chat = {
            "model": "qwen",
            "messages": [{"role": "user", "content": "a calm lake"}],
            "size": "32x32",
            "num_inference_steps": 2,
        }
        answered = client.post("/v1/chat/completions", json=chat, headers=ASK).json()
        metrics = answered["metrics"]  # vLLM-Omni's benchmark: resp["metrics"]
        _stages(metrics["stage_durations"], DIFFUSION_STAGES)
        assert metrics["peak_memory_mb"] >= 0.0
        events = []
        with client.stream(
            "POST", "/v1/chat/completions", json={**chat, "stream": True}, headers=ASK
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
        assert any("metrics" in e for e in events)


def test_serve_a_video_job_keeps_its_timings_for_the_poll(live_server, wait_for) -> None:
    live_server.need("wan")
    body = {"model": "wan", "prompt": "a fox", "size": "32x32", "num_frames": 5}
    with live_server.http() as client:
        video_id = client.post("/v1/videos", json={**body, "num_inference_steps": 2}).json()["id"]

        def done() -> Any:
            record = client.get(f"/v1/videos/{video_id}", headers=ASK).json()
            return record if record["status"] == "completed" else None

        record = wait_for(done, timeout=120)
        plain = client.get(f"/v1/videos/{video_id}").json()
        listed = client.get("/v1/videos", headers=ASK).json()["data"]
    _stages(record["stage_durations"], DIFFUSION_STAGES)
    assert record["peak_memory_mb"] >= 0.0
    assert record["inference_time_s"] == pytest.approx(record["stage_durations"]["total"])
    assert "stage_durations" not in plain
    assert next(r for r in listed if r["id"] == video_id)["stage_durations"]


def test_serve_speech_reports_its_timings_in_a_header(live_server) -> None:
    live_server.need("tts")
    voices = live_server.state.models["tts"].pipeline.voices()
    body = {"model": "tts", "input": "Hello there.", "voice": voices[0].id if voices else "x"}
    with live_server.http() as client:
        response = client.post("/v1/audio/speech", json=body, headers=ASK)
        assert response.status_code == 200
        metrics = json.loads(response.headers["x-omni-metrics"])
        assert "x-omni-metrics" not in client.post("/v1/audio/speech", json=body).headers
    _stages(metrics["stage_durations"], {"queue", "first_audio", "generate", "encode", "total"})


def test_serve_ping_and_version_answer_as_vllm(live_server) -> None:
    import httpx

    from omni_core import __version__

    for method in ("GET", "POST"):  # open, like /health
        ping = httpx.request(method, f"{live_server.url}/ping", timeout=10)
        assert ping.status_code == 200 and ping.content == b""
    version = httpx.get(f"{live_server.url}/version", timeout=10)
    assert version.status_code == 200 and version.json() == {"version": __version__}


# -- every response, for vLLM-Omni's benchmark (it sends no header) ------------------------------


@pytest.fixture(scope="module")
def reporting(checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    ids = [i for i in ("qwen", "qwen25") if i in checkpoints.paths]
    if "qwen" not in ids:
        pytest.skip(f"qwen: {checkpoints.missing.get('qwen')}")
    ckpts = Checkpoints(paths={i: checkpoints.paths[i] for i in ids})
    state = tmp_path_factory.mktemp("timings-state")
    live = start_server(server_config(ckpts, state, report_timings=True), ckpts, state)
    yield live
    live.stop()


def test_serve_report_timings_puts_them_where_the_benchmark_reads(reporting: LiveServer) -> None:
    """The paths of vLLM-Omni's benchmark (backends.py), with no header sent."""
    chat = {
        "model": "qwen",
        "messages": [{"role": "user", "content": "a lake"}],
        "size": "32x32",
        "num_inference_steps": 2,
    }
    with reporting.http() as client:
        image = client.post("/v1/images/generations", json=IMAGE).json()
        answered = client.post("/v1/chat/completions", json=chat).json()
    assert image["usage"]["peak_memory_mb"] >= 0.0  # the openai backend reads only this
    assert base64.b64decode(image["data"][0]["b64_json"])
    metrics = answered["metrics"]  # the vllm-omni backend's path when content has none
    _stages(metrics["stage_durations"], DIFFUSION_STAGES)
    assert float(metrics["peak_memory_mb"]) >= 0.0


def test_serve_chat_answers_report_their_timings(chat_server, chat_http) -> None:
    chat_server.need("qwen25")
    body = {
        "model": "qwen25",
        "messages": [{"role": "user", "content": "Hello"}],
        "modalities": ["text"],
        "max_tokens": 6,
        "temperature": 0,
    }
    whole = chat_http.post("/v1/chat/completions", json=body, headers=ASK).json()
    _stages(whole["metrics"]["stage_durations"], {"queue", "first_token", "generate", "total"})
    assert "metrics" not in chat_http.post("/v1/chat/completions", json=body).json()
    events = []
    with chat_http.stream(
        "POST", "/v1/chat/completions", json={**body, "stream": True}, headers=ASK
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))
    last = [e for e in events if "metrics" in e]
    assert len(last) == 1 and last[0]["choices"][0]["finish_reason"]


def test_serve_a_device_that_reports_its_peak_gives_the_benchmark_its_memory_section(
    reporting: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM-Omni's benchmark prints its Peak Memory section when ``peak_memory_mb`` > 0: on a
    device whose allocator reports its peak (CUDA, ROCm, NPU) the engine resets the peak as a
    request starts on an idle engine and reads it when it finishes. The CPU reports none (0.0);
    a platform standing in for such a device shows the path here."""
    from omni_core.contract.platforms import CpuPlatform

    class Reporting(CpuPlatform):
        resets = 0

        def memory_stats(self, device: Any = None) -> dict[str, int]:
            return {"allocated_bytes": 1 << 20, "peak_allocated_bytes": 3 << 20}

        def reset_peak_memory(self, device: Any = None) -> None:
            Reporting.resets += 1

    served = reporting.state.models["qwen"]
    monkeypatch.setattr(served.engine, "_platform", Reporting())
    chat = {
        "model": "qwen",
        "messages": [{"role": "user", "content": "a lake"}],
        "size": "32x32",
        "num_inference_steps": 2,
    }
    with reporting.http() as client:
        image = client.post("/v1/images/generations", json=IMAGE).json()
        answered = client.post("/v1/chat/completions", json=chat).json()
    assert image["usage"]["peak_memory_mb"] == image["peak_memory_mb"] == 3.0
    assert answered["metrics"]["peak_memory_mb"] == 3.0
    assert Reporting.resets >= 2  # once per request that found the engine idle
