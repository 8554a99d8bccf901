"""The WebSocket text stream's splitter carries a multi-speaker script's label to each sentence.

A script's line opens with its speaker's label (``SpeechPipeline.script_label``, a regular
expression the model declares); the stream speaks the script a sentence at a time, so a sentence
that continues a line must open with that line's label, or the model speaks it in its default
voice. The label here is a third-party model's own ("<name>:"), not VibeVoice's: the splitter
knows no family. Served, a third-party multi-speaker voice (``tests/acme_dialogue.py``: a
tone per line in its speaker's pitch) speaks each sentence of a streamed script as ``POST
/v1/audio/speech`` speaks it; VibeVoice's own check is
``plugins/omni-vibevoice/tests/test_omni_vibevoice_served.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from omni_core.serving.routes.speech.stream import Splitter

from .conftest import Checkpoints, LiveServer, server_config, start_server

#: A made-up family's label: a name in angle brackets and a colon ("<ada>:").
LABEL = r"<\w+>\s*:"


def _run(splitter: Splitter, *pieces: str) -> list[str]:
    out = [s for piece in pieces for s in splitter.feed(piece)]
    return out + splitter.flush()


def test_the_label_in_effect_opens_each_sentence() -> None:
    pieces = ("<ada>: Hello there. How are ", "you?\n<bob>: Fine. Thanks!\nAnd", " you?")
    assert _run(Splitter(label=LABEL), *pieces) == [
        "<ada>: Hello there.",
        "<ada>: How are you?",
        "<bob>: Fine.",
        "<bob>: Thanks!",
        "<bob>: And you?",
    ]
    # without a label (a one-voice model) the sentences are the text's own
    assert _run(Splitter(), *pieces)[1:3] == ["How are you?", "<bob>: Fine."]


def test_a_sentence_of_several_lines_hands_on_its_last_label() -> None:
    splitter = Splitter(label=LABEL)
    assert _run(splitter, "<ADA>: hi\n<bob>: yes. and more.") == [
        "<ADA>: hi\n<bob>: yes.",
        "<bob>: and more.",
    ]


def test_text_before_any_label_is_left_as_it_is() -> None:
    assert _run(Splitter(label=LABEL), "No label. <ada>: Hi. There.") == [
        "No label.",
        "<ada>: Hi.",
        "<ada>: There.",
    ]


def test_clause_and_none_granularities_carry_it_too() -> None:
    comma, stop = "\uff0c", "\u3002"  # the CJK comma and full stop
    assert _run(Splitter("clause", label=LABEL), f"<ada>: ni hao{comma}shi jie{stop}") == [
        f"<ada>: ni hao{comma}",
        f"<ada>: shi jie{stop}",
    ]
    assert _run(Splitter("none", label=LABEL), "<ada>: Hi. ", "There.") == ["<ada>: Hi. There."]


def test_a_long_sentence_keeps_room_for_its_label() -> None:
    from omni_core.serving.routes.speech.stream import MAX_SENTENCE_CHARS

    words = " ".join(["word"] * 2000)  # 9999 characters, no sentence end
    out = _run(Splitter(label=LABEL), f"<ada>: {words}")
    assert len(out) == 3 and all(s.startswith("<ada>: ") for s in out)
    assert max(len(s) for s in out) <= MAX_SENTENCE_CHARS


# -- served: a third-party multi-speaker voice -------------------------------------------------


@pytest.fixture(scope="module")
def dialogue(acme_dialogue: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from omni_core.contract.host import PluginHost, set_host

    root = tmp_path_factory.mktemp("dialogue")
    host = PluginHost(autoload=False)
    host.register_object("omni-acme-dialogue", acme_dialogue.AcmeDialoguePlugin())
    previous = set_host(host)
    try:
        ckpts = Checkpoints(paths={"acme": acme_dialogue.build_tiny_checkpoint(root / "acme")})
        live = start_server(server_config(ckpts, root / "state"), ckpts, root / "state")
    finally:
        set_host(previous)
    yield live
    live.stop()


def _session(server: LiveServer, config: dict[str, Any], pieces: list[str]) -> list[Any]:
    import websockets

    async def run() -> list[Any]:
        url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        headers = {"Authorization": f"Bearer {server.api_key}"}
        received: list[Any] = []
        async with websockets.connect(url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "session.config", **config}))
            for piece in pieces:
                await ws.send(json.dumps({"type": "input.text", "text": piece}))
            await ws.send(json.dumps({"type": "input.done"}))
            try:
                async for item in ws:
                    received.append(item if isinstance(item, bytes) else json.loads(item))
            except websockets.ConnectionClosed:
                pass
        return received

    return asyncio.run(run())


def test_the_plugin_uses_only_public_omni_core_names(acme_dialogue: Any) -> None:
    from pathlib import Path

    from omni_core.testing import assert_imports_only_faces

    assert_imports_only_faces([Path(acme_dialogue.__file__)], test_kit=False)


def test_each_streamed_sentence_is_spoken_as_over_http(dialogue: LiveServer) -> None:
    config = {"model": "acme", "voice": "low", "response_format": "pcm"}
    config["speakers"] = {"ada": "high"}  # bob keeps the labelled default, mid
    pieces = ["<ada>: Good morning. How are ", "you?\n<bob>: Fine, thanks. And ", "you?"]
    received = _session(dialogue, config, pieces)
    sentences: list[list[Any]] = []
    for item in received:
        if isinstance(item, bytes):
            sentences[-1][1] += item
        elif item["type"] == "audio.start":
            sentences.append([item["sentence_text"], b""])
        else:
            assert item["type"] in ("audio.done", "session.done") and not item.get("error"), item
    assert [text for text, _ in sentences] == [
        "<ada>: Good morning.",
        "<ada>: How are you?",
        "<bob>: Fine, thanks.",
        "<bob>: And you?",
    ]
    client = dialogue.openai()

    def http(text: str, **extra: Any) -> bytes:
        body = {"model": "acme", "voice": "low", "input": text, "response_format": "pcm"}
        return client.audio.speech.create(**body, extra_body=extra).content

    for text, audio in sentences:
        speakers = {"speakers": {"ada": "high"}} if text.startswith("<ada>") else {}
        assert audio and audio == http(text, **speakers), text
    # unlabelled, a continuation is the request's voice: other samples
    assert http("How are you?") != sentences[1][1]
    assert http("And you?") != sentences[3][1]
    # the whole script over HTTP names every speaker; a speaker who says nothing is refused
    with pytest.raises(openai.BadRequestError, match="says nothing"):
        http("<bob>: Hi.", speakers={"ada": "high"})


def test_a_session_checks_all_its_speakers_at_config(dialogue: LiveServer) -> None:
    for speakers, message in (
        ({"ada": "nobody"}, "unknown voice 'nobody'"),
        ({"ada": "high", "bob": "mid", "cy": "low"}, "at most 2"),
        ({"a-b": "high"}, "is not a name"),
    ):
        config = {"model": "acme", "voice": "low", "speakers": speakers}
        events = _session(dialogue, config, ["<ada>: Hi."])
        assert events[0]["type"] == "error" and events[0]["param"] == "speakers", events
        assert message in events[0]["message"], events
