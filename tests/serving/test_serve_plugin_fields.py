"""What a foreign field becomes is the model's to declare, not the server's to know: a real
server (127.0.0.1, the official ``openai`` client) serves the third-party acme voice
(``tests/acme_ar_tts.py``) beside a tiny VITS voice of omni-tts.

acme's extras model takes vLLM-Omni's ``max_new_tokens`` as an alias of its own ``max_frames``,
so the server hands it over (the same audio as acme's own name, nothing reported), while VITS,
which declares no such field, gets the compat table's rule (accepted, reported ignored). The
shared sampling fields are honoured by the autoregressive acme and reported ignored for VITS.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from .conftest import Checkpoints, LiveServer, _build, server_config, start_server

TEXT = "a much longer sentence to speak, with more frames"
IGNORED = "x-omni-ignored-fields"


@pytest.fixture(scope="module")
def plugin_server(
    acme_ar_tts: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    from omni_core.contract.host import PluginHost, set_host

    root = tmp_path_factory.mktemp("plugin-fields")
    host = PluginHost()  # the installed plugins and acme
    host.register_object("omni-acme-ar-tts", acme_ar_tts.AcmePlugin())
    previous = set_host(host)
    try:
        ckpts = Checkpoints(paths={"acme": acme_ar_tts.build_tiny_checkpoint(root / "acme")})
        _build(ckpts, "tts", root, "omni_tts.testing", "build_tiny_tts", family="vits")
        state_dir = root / "state"
        live = start_server(server_config(ckpts, state_dir), ckpts, state_dir)
    finally:
        set_host(previous)
    yield live
    live.stop()


def _speak(client: Any, model: str, voice: str, **extra: Any) -> tuple[bytes, dict[str, str]]:
    raw = client.audio.speech.with_raw_response.create(
        model=model, voice=voice, input=TEXT, response_format="pcm", extra_body=extra
    )
    return raw.content, dict(raw.headers)


def _voice_of(server: LiveServer, model: str) -> str:
    with server.http() as http:
        voices = http.get("/v1/audio/voices", params={"model": model}).json()["data"]
    return voices[0]["id"] if voices else ""  # the openai SDK sends one always


def test_a_foreign_name_declared_by_the_plugin_is_its_own_field(plugin_server: LiveServer) -> None:
    client = plugin_server.openai()
    whole, _ = _speak(client, "acme", "ada")
    ours, ours_headers = _speak(client, "acme", "ada", max_frames=2)
    theirs, headers = _speak(client, "acme", "ada", max_new_tokens=2)
    assert len(whole) > len(ours) == 2 * 8 * 2  # two frames of 8 samples, 16-bit PCM
    assert theirs == ours
    assert IGNORED not in headers and IGNORED not in ours_headers
    with pytest.raises(openai.BadRequestError) as info:  # the plugin's bounds, either name
        _speak(client, "acme", "ada", max_new_tokens=0)
    assert info.value.body["param"] == "max_new_tokens"  # type: ignore[index]


def test_a_model_that_declares_no_such_field_gets_the_table_rule(
    plugin_server: LiveServer,
) -> None:
    plugin_server.need("tts")
    client = plugin_server.openai()
    voice = _voice_of(plugin_server, "tts")
    plain, _ = _speak(client, "tts", voice, seed=1)
    audio, headers = _speak(client, "tts", voice, seed=1, max_new_tokens=2)
    assert audio == plain
    assert "max_new_tokens" in headers[IGNORED].split(", ")


def test_sampling_fields_reach_autoregressive_voices_only(plugin_server: LiveServer) -> None:
    client = plugin_server.openai()
    _, acme = _speak(client, "acme", "ada", temperature=0.5, top_k=5, max_frames=2)
    assert IGNORED not in acme  # the shared fields of the request: acme samples with them
    if plugin_server.has("tts"):
        voice = _voice_of(plugin_server, "tts")
        _, vits = _speak(client, "tts", voice, temperature=0.5, top_k=5)
        assert set(vits[IGNORED].split(", ")) == {"temperature", "top_k"}


def test_the_plugin_field_keeps_its_name_in_the_python_api(
    acme_ar_tts: Any, tmp_path: Path
) -> None:
    """The alias is the extras model's: ``Omni`` takes either name too (one request path)."""
    from omni_core import Omni
    from omni_core.contract.host import PluginHost, set_host

    host = PluginHost(autoload=False)
    host.register_object("omni-acme-ar-tts", acme_ar_tts.AcmePlugin())
    previous = set_host(host)
    try:
        with Omni(acme_ar_tts.build_tiny_checkpoint(tmp_path / "acme"), device="cpu") as omni:
            ours = omni.generate(TEXT, max_frames=2).audio
            theirs = omni.generate(TEXT, max_new_tokens=2).audio
    finally:
        set_host(previous)
    assert len(ours) == 16 and (ours == theirs).all()
