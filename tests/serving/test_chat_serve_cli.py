"""A real ``omni serve`` process (the CLI, uvicorn, warm-up) serving an omni chat model that a
third-party plugin installs through its ``omni`` entry point: the official ``openai`` client
gets a spoken answer, whole and streamed, and the model's voices."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import httpx

from omni_core.testing import write_distribution
from omni_core.testing.services import omni_serve


def test_omni_serve_answers_with_speech(acme_chat, tmp_path: Path) -> None:
    import openai

    site = tmp_path / "site"
    write_distribution(site, "omni-acme-chat", {"acme_chat": Path(acme_chat.__file__).read_text()})
    model = acme_chat.build_tiny_chat(tmp_path / "omni", talker=True, seed=2)
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    args = [f"acme={model}", "--log-level", "warning"]
    with omni_serve(*args, log=tmp_path / "serve.log", timeout=240, PYTHONPATH=path) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
        voices = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["voices"]
        assert voices == ["ada", "bob"]
        body = {
            "model": "acme",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 8,
            "modalities": ["text", "audio"],
        }
        whole = client.chat.completions.create(**body, audio={"voice": "bob", "format": "pcm16"})
        message = whole.choices[0].message
        assert message.audio.transcript == message.content and message.audio.data
        streamed, text = b"", ""
        for chunk in client.chat.completions.create(
            **body, audio={"voice": "bob", "format": "pcm16"}, stream=True
        ):
            text += chunk.choices[0].delta.content or ""
            audio = chunk.choices[0].delta.to_dict().get("audio") or {}
            streamed += base64.b64decode(audio.get("data", ""))
        assert text == message.content
        assert streamed == base64.b64decode(message.audio.data)
