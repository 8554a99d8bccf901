"""Qwen3-TTS from a real ``omni serve`` (tiny checkpoints in the official layout, 127.0.0.1):
the official ``openai`` client streams audio (chunked and SSE) whose deltas make the whole file,
in every format; concurrent requests share decode steps; ``instructions`` and ``language`` are
honoured or refused, never ignored; a voice uploaded through ``POST /v1/audio/voices`` clones
in the next request (equal to sending the same reference inline) and survives a restart.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

pytest.importorskip("omni_qwen.tts")

GREEDY = {"temperature": 0, "max_new_tokens": 24}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from omni_qwen.testing import build_tiny_qwen3_tts

    root = tmp_path_factory.mktemp("qwen3-tts-serve")
    return {
        "cv": build_tiny_qwen3_tts(root / "cv", "custom_voice"),
        "clone": build_tiny_qwen3_tts(root / "base", "base"),
    }


class Server:
    def __init__(
        self, checkpoints: dict[str, Path], state: Path, log: Path, extra: tuple[str, ...] = ()
    ) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-c",
            "from omni_core.cli import main; main()",
            "serve",
            *(f"{k}={v}" for k, v in checkpoints.items()),
            "--port",
            str(self.port),
            "--state-dir",
            str(state),
            "--max-batch",
            "8",
            "--log-level",
            "warning",
            *extra,
        ]
        self.log = log
        self.proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"server not healthy in time:\n{log.read_text()[-3000:]}")

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def server(checkpoints, state_dir, tmp_path_factory):
    srv = Server(checkpoints, state_dir, tmp_path_factory.mktemp("log") / "serve.log")
    yield srv
    srv.stop()


def _pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def _reference_wav(seconds: float = 1.5, rate: int = 24000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 180 * t) + 0.1 * np.sin(2 * np.pi * 530 * t)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes((tone * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def test_openai_client_streams_qwen3_tts(server: Server) -> None:
    client = server.client()
    body = {"model": "cv", "input": "Streaming speech from Qwen three.", "voice": "serena"}
    whole = client.audio.speech.create(**body, response_format="pcm", extra_body=GREEDY).read()
    with client.audio.speech.with_streaming_response.create(
        **body, response_format="pcm", stream_format="audio", extra_body=GREEDY
    ) as response:
        assert response.headers["x-omni-sample-rate"] == "24000"
        parts = [p for p in response.iter_bytes() if p]
    assert len(parts) >= 2  # chunks arrived as they were made
    assert b"".join(parts) == whole and len(whole) > 2 * 1920 * 2
    # SSE: speech.audio.delta events carry base64 PCM deltas, then speech.audio.done
    events = []
    with client.audio.speech.with_streaming_response.create(
        **body, response_format="pcm", stream_format="sse", extra_body=GREEDY
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    deltas = [base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and b"".join(deltas) == whole
    # every format, whole file and streamed
    for fmt, magic in (("wav", b"RIFF"), ("flac", b"fLaC"), ("mp3", b"")):
        data = client.audio.speech.create(**body, response_format=fmt, extra_body=GREEDY).read()
        assert data.startswith(magic) and len(data) > 200, fmt
        with client.audio.speech.with_streaming_response.create(
            **body, response_format=fmt, stream_format="audio", extra_body=GREEDY
        ) as response:
            assert len(response.read()) > 200, fmt


def test_instructions_language_and_concurrency(server: Server) -> None:
    client = server.client()
    base = {"model": "cv", "input": "Hello there.", "voice": "aiden", "response_format": "pcm"}
    plain = client.audio.speech.create(**base, extra_body=GREEDY).read()
    styled = client.audio.speech.create(**base, instructions="whisper", extra_body=GREEDY).read()
    assert plain != styled  # honoured: the prompt changed
    english = client.audio.speech.create(**base, extra_body={**GREEDY, "language": "English"})
    assert len(english.read()) > 0
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(**base, extra_body={**GREEDY, "language": "Klingon"})
    assert info.value.body["param"] == "language"
    with pytest.raises(openai.BadRequestError) as info:  # a CustomVoice model cannot clone
        client.audio.speech.create(**base, extra_body={**GREEDY, "ref_audio": "AAAA"})
    assert info.value.body["param"] == "ref_audio"
    # eight at once share decode steps; each equals its own run alone
    texts = [f"Sentence number {i} to speak." for i in range(8)]
    alone = [
        client.audio.speech.create(**{**base, "input": t}, extra_body=GREEDY).read()
        for t in texts[:2]
    ]
    with ThreadPoolExecutor(8) as pool:
        together = list(
            pool.map(
                lambda t: client.audio.speech.create(
                    **{**base, "input": t}, extra_body=GREEDY
                ).read(),
                texts,
            )
        )
    for mine, single in zip(together[:2], alone, strict=True):  # rounding of batched matmuls
        diff = np.abs(_pcm(mine).astype(int) - _pcm(single).astype(int))
        assert len(mine) == len(single) and diff.max() <= 2, diff.max()


def test_uploaded_voice_clones_and_survives_a_restart(
    server: Server, checkpoints, state_dir, tmp_path_factory
) -> None:
    reference = _reference_wav()
    http = httpx.Client(base_url=server.url, timeout=120)
    files = {"audio": ("me.wav", reference, "audio/wav")}
    missing = http.post("/v1/audio/voices", data={"name": "me"}, files=files)
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "consent"
    bad = http.post(
        "/v1/audio/voices",
        data={"name": "junk", "consent": "true"},
        files={"audio": ("x.wav", b"RIFF\x00\x00not audio", "audio/wav")},
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_audio"
    made = http.post(
        "/v1/audio/voices",
        files=files,
        data={"name": "me", "consent": "Ada Lovelace", "transcript": "a test tone"},
    )
    assert made.status_code == 201, made.text
    assert made.json()["models"] == ["clone"]
    listed = http.get("/v1/audio/voices").json()
    assert "me" in listed["voices"] and "serena" in listed["voices"]

    client = server.client()
    speak = {"model": "clone", "input": "Cloned speech.", "response_format": "pcm"}
    cloned = client.audio.speech.create(**speak, voice="me", extra_body=GREEDY).read()
    inline = client.audio.speech.with_raw_response.create(
        **speak,
        voice="alloy",
        extra_body={
            **GREEDY,
            "ref_audio": base64.b64encode(reference).decode(),
            "ref_text": "a test tone",
        },
    )
    assert inline.headers["x-omni-ignored-fields"] == "voice"  # ref_audio is the voice
    assert inline.content == cloned  # the stored, prepared voice is the same voice
    assert len(_pcm(cloned)) > 0
    server.stop()

    again = Server(checkpoints, state_dir, tmp_path_factory.mktemp("log2") / "serve.log")
    try:
        http = httpx.Client(base_url=again.url, timeout=120)
        assert "me" in http.get("/v1/audio/voices").json()["voices"]
        client = again.client()
        after = client.audio.speech.create(**speak, voice="me", extra_body=GREEDY).read()
        assert after == cloned
        assert http.delete("/v1/audio/voices/me").status_code == 200
        assert http.delete("/v1/audio/voices/me").status_code == 404
        with pytest.raises(openai.BadRequestError):
            client.audio.speech.create(**speak, voice="me", extra_body=GREEDY)
    finally:
        again.stop()
