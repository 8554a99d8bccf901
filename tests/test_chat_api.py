"""Chat models through the Python API, the engine and ``omni generate chat``, on the third-party
test plugin ``tests/acme_chat.py`` (a tiny random Qwen2 thinker, and the same with a talker).

Checked against the plugin's plain loop (transformers ``generate``, a DynamicCache talker, the
whole-file codec): greedy text token for token, spoken answers sample for sample, streamed
deltas concatenating to the whole answer, concurrent answers equal to each alone.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from omni_core import InvalidRequestError, Omni
from omni_core.chat import ChatMessage, ChatPart
from omni_core.runtime.engine import Engine
from omni_core.runtime.jobs import Job

PROMPTS = ["hello there", "what is the capital of france?", "hi"]


@pytest.fixture(scope="module")
def models(acme_chat, chat_host, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("acme-chat")
    paths = SimpleNamespace(
        text=acme_chat.build_tiny_chat(root / "text"),
        omni=acme_chat.build_tiny_chat(root / "omni", talker=True, seed=1),
    )
    with Omni(paths.text, device="cpu") as text, Omni(paths.omni, device="cpu") as spoken:
        yield SimpleNamespace(text=text, omni=spoken, paths=paths)


def _turn(text: str) -> list[ChatMessage]:
    return [ChatMessage.text("user", text)]


def _reference_text(acme_chat, omni: Omni, messages: list[ChatMessage], max_tokens: int):
    ids, audio = acme_chat.reference_answer(omni.pipeline, messages, max_tokens)
    return omni.pipeline.tokenizer.decode(ids, skip_special_tokens=True), ids, audio


def test_plugin_imports_only_public_names(acme_chat) -> None:
    from omni_core.testing import assert_imports_only_faces

    source = Path(acme_chat.__file__).read_text()
    assert "from omni_core.chat import" in source
    assert_imports_only_faces([Path(acme_chat.__file__)], test_kit=False)


def test_text_answers_equal_generate(acme_chat, models) -> None:
    omni = models.text
    assert omni.spec.name == "acme-chat" and omni.pipeline.output_modalities == ("text",)
    for prompt in PROMPTS:
        expected, ids, _ = _reference_text(acme_chat, omni, _turn(prompt), 16)
        result = omni.chat(prompt, max_tokens=16)
        assert result.text == expected, prompt
        usage = result.info["usage"]
        assert usage.completion_tokens == len(ids)
        assert usage.prompt_tokens == len(omni.pipeline.prompt_ids(_turn(prompt)))
        assert result.info["finish_reason"] == ("length" if len(ids) == 16 else "stop")
        assert result.audio is None and result.timings["time_to_first_token_s"] > 0


def test_spoken_answer_equals_the_plain_loop_and_deltas_concatenate(acme_chat, models) -> None:
    omni = models.omni
    assert omni.pipeline.output_modalities == ("text", "audio")
    assert [v.id for v in omni.pipeline.voices()] == ["ada", "bob"]
    messages = _turn(PROMPTS[1])
    ids, audio = acme_chat.reference_answer(omni.pipeline, messages, 12, voice="bob")
    whole = omni.chat(messages, max_tokens=12, modalities=["text", "audio"], voice="bob")
    assert whole.text == omni.pipeline.tokenizer.decode(ids, skip_special_tokens=True)
    assert whole.sample_rate == acme_chat.SAMPLE_RATE
    np.testing.assert_allclose(whole.audio, audio.numpy(), atol=1e-6)
    assert whole.timings["time_to_first_audio_s"] > 0
    deltas = list(
        omni.chat_stream(messages, max_tokens=12, modalities=["text", "audio"], voice="bob")
    )
    assert "".join(d.text for d in deltas) == whole.text
    pieces = [d.audio.samples for d in deltas if d.audio is not None]
    assert len(pieces) > 1  # spoken while written, not at the end in one piece
    np.testing.assert_array_equal(np.concatenate(pieces), whole.audio)
    assert deltas[-1].finish_reason is not None and deltas[-1].usage is not None
    assert all(d.usage is None for d in deltas[:-1])
    other = omni.chat(messages, max_tokens=12, modalities=["text", "audio"], voice="ada")
    assert other.text == whole.text and not np.array_equal(other.audio, whole.audio)


def test_engine_answers_concurrent_requests_as_each_alone(models) -> None:
    omni = models.omni
    asks = [(p, audio) for p in PROMPTS for audio in (False, True)]
    alone = [
        omni.chat(p, max_tokens=10, modalities=["text", "audio"] if a else ["text"])
        for p, a in asks
    ]
    runtime = omni.pipeline.shared_runtime()
    steps, rows = runtime.steps, runtime.rows
    # max_batch is diffusion's step batch: a chat runtime runs as many answers as it has slots
    engine = Engine(omni.pipeline, name="acme-chat", max_batch=1).start()
    assert engine.capacity == omni.pipeline.max_concurrency
    try:
        seen: list[list] = [[] for _ in asks]
        jobs = []
        for i, (prompt, audio) in enumerate(asks):
            request = omni.pipeline.validate(
                omni.request(
                    messages=_turn(prompt),
                    max_tokens=10,
                    modalities=("text", "audio") if audio else ("text",),
                )
            )
            jobs.append(engine.submit(Job(request, on_chunk=seen[i].append)))
        for i, job in enumerate(jobs):
            result = job.future.result(60)
            assert result.text == alone[i].text == "".join(d.text for d in seen[i])
            if asks[i][1]:  # batched float32 math: equal to rounding
                np.testing.assert_allclose(result.audio, alone[i].audio, atol=1e-6)
            else:
                assert result.audio is None
    finally:
        engine.stop()
    assert runtime.rows - rows > runtime.steps - steps  # requests shared thinker steps
    assert runtime.open_streams == 0


def test_engine_cancels_a_running_answer(models, cancel_running) -> None:
    pipeline = models.omni.pipeline
    turn = models.omni.request(messages=_turn("talk"), max_tokens=200, modalities=("text", "audio"))
    cancel_running(pipeline, pipeline.validate(turn))


def test_loaded_without_the_talker_answers_text_only(models) -> None:
    with Omni(models.paths.omni, device="cpu", enable_audio_output=False) as omni:
        assert omni.pipeline.output_modalities == ("text",) and omni.pipeline.voices() == []
        with pytest.raises(InvalidRequestError) as info:
            omni.chat("hi", modalities=["text", "audio"])
        assert info.value.param == "modalities" and "speech chain" in info.value.message
        assert omni.chat("hi", max_tokens=8).text == models.omni.chat("hi", max_tokens=8).text


@pytest.mark.parametrize(
    ("messages", "fields", "param"),
    [
        ([], {}, "messages"),
        ([{"role": "assistant", "content": "hi"}], {}, "messages"),
        ([{"role": "tool", "content": "hi"}], {}, "messages[0]"),
        ([{"role": "user", "content": [3]}], {}, "messages[0].content[0]"),
        ("hi", {"modalities": ["text", "audio"], "voice": "zoe"}, "audio.voice"),
        ("hi", {"max_tokens": 0}, "max_tokens"),
        ("hi", {"temperature": 9.0}, "temperature"),
    ],
)
def test_invalid_requests_name_the_field(models, messages, fields, param) -> None:
    with pytest.raises(InvalidRequestError) as info:
        models.omni.chat(messages, **fields)
    assert info.value.param == param


def test_generate_on_a_chat_model_points_to_chat(models) -> None:
    """``Omni.generate(prompt)`` builds no conversation: the error says what answers one."""
    with pytest.raises(InvalidRequestError, match=r"Omni\(\.\.\.\)\.chat\(text\)") as info:
        models.text.generate("hi")
    assert info.value.param == "messages"


def test_text_only_model_refuses_audio(models) -> None:
    with pytest.raises(InvalidRequestError) as info:
        models.text.chat("hi", modalities=["text", "audio"])
    assert info.value.param == "modalities"


def test_dict_messages_with_media_parts(acme_chat, models) -> None:
    from PIL import Image

    image = Image.new("RGB", (40, 24), "red")
    tone = np.sin(np.linspace(0, 400, 16000)).astype(np.float32)
    audio = ChatPart(kind="audio", audio=tone, sample_rate=16000)
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": ["look at", image, audio]},
    ]
    result = models.text.chat(messages, max_tokens=6)
    expected = [
        ChatMessage.text("system", "be brief"),
        ChatMessage.text("user", "look at[image 40x24][audio 1.00 s at 16000 Hz]"),
    ]
    assert result.info["usage"].prompt_tokens == len(models.text.pipeline.prompt_ids(expected))
    assert result.text == _reference_text(acme_chat, models.text, expected, 6)[0]


def test_generate_chat_cli(acme_chat, models, tmp_path: Path) -> None:
    from omni_core.cli import cli
    from omni_core.media import audio as codecs

    runner = CliRunner()
    text = runner.invoke(
        cli, ["generate", "chat", str(models.paths.text), "hello there", "--max-tokens", "8", "-q"]
    )
    assert text.exit_code == 0, text.output
    assert text.stdout == _reference_text(acme_chat, models.text, _turn("hello there"), 8)[0] + "\n"
    out = tmp_path / "answer.wav"
    spoken = runner.invoke(
        cli,
        [
            "generate",
            "chat",
            str(models.paths.omni),
            "hi",
            "--max-tokens",
            "6",
            "--voice",
            "bob",
            "-o",
            str(out),
        ],
    )
    assert spoken.exit_code == 0, spoken.output
    assert f"wrote {out}" in spoken.stderr
    samples, rate = codecs.decode_audio(out.read_bytes())
    whole = models.omni.chat("hi", max_tokens=6, modalities=["text", "audio"], voice="bob")
    assert rate == whole.sample_rate
    np.testing.assert_allclose(samples, whole.audio, atol=1.5 / 32767)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--image", "missing.png"], "missing.png"),
        (["-o", "answer.ogg"], "--output"),
        (["-o", "answer.wav"], "modalities"),
        (["--option", "no_such_option=1"], "no_such_option"),
    ],
)
def test_generate_chat_cli_errors(models, args, needle, tmp_path: Path, monkeypatch) -> None:
    from omni_core.cli import cli

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["generate", "chat", str(models.paths.text), "hi", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output
    assert not (tmp_path / "answer.wav").exists()
