"""Qwen3-Omni on the chat runtime against transformers' own ``generate()``, on a tiny random
checkpoint built here in the official layout (offline).

- greedy text equals ``generate(do_sample=False)`` token for token (text, image, audio in);
- the audio of an answer equals ``generate(talker_do_sample=False)``'s (same length, within
  1e-4 with code2wav's left context covering the whole answer; chunks with less context are
  measured separately);
- streamed deltas concatenate to the whole answer, two concurrent requests answer as each does
  alone, and a checkpoint loaded without its talker answers text and refuses audio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from omni_core import GenerationRequest, InvalidRequestError  # noqa: E402
from omni_core.chat import ChatMessage, ChatPart  # noqa: E402

#: Audio within this of transformers' (float32 on CPU: the same ops in another order).
AUDIO_ATOL = 1e-4


def _options(**extra: Any) -> Any:
    from omni_core.testing import pipeline_options

    return pipeline_options(dtype=torch.float32, **extra)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen.testing import build_tiny_qwen3_omni

    torch.set_num_threads(2)
    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("qwen3-omni") / "tiny")


@pytest.fixture(scope="module")
def pipe(checkpoint: Path) -> Any:
    """Small chunks (many of them), code2wav context covering the whole answer."""
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    options = _options(left_context=4096, first_chunk_frames=2, chunk_frames=3)
    return Qwen3OmniPipeline.from_pretrained(checkpoint, options)


@pytest.fixture(scope="module")
def reference(pipe: Any) -> Any:
    """transformers' model: the same weights (the pipeline's own loaded model)."""
    return pipe.model


def _image() -> Any:
    from PIL import Image

    pixels = (np.random.RandomState(0).rand(40, 56, 3) * 255).astype("uint8")
    return Image.fromarray(pixels)


def _tone() -> np.ndarray:
    return (0.2 * np.sin(np.linspace(0, 900, 16000))).astype(np.float32)


CONVERSATIONS = {
    "text": [ChatMessage.text("user", "hello world")],
    "system+turns": [
        ChatMessage.text("system", "you the world"),
        ChatMessage.text("user", "hello"),
        ChatMessage.text("assistant", "world"),
        ChatMessage.text("user", "the world"),
    ],
    "image": [
        ChatMessage(
            role="user",
            parts=[ChatPart(kind="image", image=_image()), ChatPart(kind="text", text="hello")],
        )
    ],
    "audio": [
        ChatMessage(
            role="user",
            parts=[
                ChatPart(kind="audio", audio=_tone(), sample_rate=16000),
                ChatPart(kind="text", text="you"),
            ],
        )
    ],
}


def _request(pipe: Any, messages: list[ChatMessage], audio: bool, **fields: Any) -> Any:
    fields.setdefault("temperature", 0.0)
    fields.setdefault("max_tokens", 24)
    modalities = ("text", "audio") if audio else ("text",)
    return pipe.validate(GenerationRequest(messages=messages, modalities=modalities, **fields))


def _answer(stream: Any) -> tuple[list[Any], list[int], np.ndarray]:
    deltas = list(stream)
    pieces = [d.audio.samples for d in deltas if d.audio is not None]
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    return deltas, list(stream.ids), audio


def _encode(pipe: Any, messages: list[ChatMessage]) -> dict[str, Any]:
    from omni_qwen.omni.qwen3_prompt import encode

    return encode(pipe.processor, messages, videos=pipe.takes_videos)


def _generate(pipe: Any, model: Any, messages: list[ChatMessage], audio: bool) -> Any:
    inputs = _encode(pipe, messages)
    out = model.generate(
        **inputs,
        speaker="ethan",
        return_audio=audio,
        thinker_max_new_tokens=24,
        thinker_do_sample=False,
        thinker_eos_token_id=pipe.stop_ids(),
        talker_do_sample=False,
        talker_max_new_tokens=4096,
    )
    sequences, wav = out if audio else (out, None)
    made = sequences[0, inputs["input_ids"].shape[1] :].tolist()
    stops = set(pipe.stop_ids())
    cut = next((i for i, t in enumerate(made) if t in stops), len(made))
    return made[:cut], None if wav is None else wav.reshape(-1).float().numpy()


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_greedy_text_equals_generate(pipe: Any, reference: Any, name: str) -> None:
    messages = CONVERSATIONS[name]
    _, ids, _ = _answer(pipe.open(_request(pipe, messages, audio=False)))
    expected, _ = _generate(pipe, reference, messages, audio=False)
    assert ids == expected
    assert len(ids) > 3


@pytest.mark.parametrize("name", ["text", "system+turns"])
def test_audio_equals_generate(pipe: Any, reference: Any, name: str) -> None:
    """An answer ending on its stop token; a multi-turn one (the talker's prompt holds every
    user turn, as generate() builds it)."""
    messages = CONVERSATIONS[name]
    deltas, ids, audio = _answer(pipe.open(_request(pipe, messages, audio=True)))
    expected_ids, expected_audio = _generate(pipe, reference, messages, audio=True)
    assert ids == expected_ids
    if name == "text":
        assert deltas[-1].finish_reason == "stop"
    assert audio.shape == expected_audio.shape
    assert audio.size >= 8 * 1920  # several chunks of 2-3 frames
    assert np.abs(expected_audio).max() > 0.1  # audible, so the comparison means something
    np.testing.assert_allclose(audio, expected_audio, atol=AUDIO_ATOL, rtol=0)


def test_image_answer_audio_equals_generate(pipe: Any, reference: Any) -> None:
    """The talker's prompt with media (hidden_projection at the image positions, 3D RoPE), on
    an answer cut by ``max_tokens``: like ``generate()``, its last token is not spoken."""
    messages = CONVERSATIONS["image"]
    deltas, ids, audio = _answer(pipe.open(_request(pipe, messages, audio=True)))
    expected_ids, expected_audio = _generate(pipe, reference, messages, audio=True)
    assert ids == expected_ids and deltas[-1].finish_reason == "length"
    assert audio.shape == expected_audio.shape
    np.testing.assert_allclose(audio, expected_audio, atol=AUDIO_ATOL, rtol=0)


def test_streamed_deltas_concatenate_to_the_whole(pipe: Any) -> None:
    request = _request(pipe, CONVERSATIONS["system+turns"], audio=True, max_tokens=12, stream=True)
    stream = pipe.open(request)  # streamed: code2wav chunks (not streamed: one piece)
    deltas, ids, audio = _answer(stream)
    text_deltas = [d.text for d in deltas if d.text]
    assert len(text_deltas) > 1 and sum(d.audio is not None for d in deltas) > 2
    assert "".join(text_deltas) == pipe.processor.tokenizer.decode(ids, skip_special_tokens=True)
    assert deltas[-1].usage.completion_tokens == len(ids)
    assert deltas[-1].usage.prompt_tokens == _encode(pipe, request.messages)["input_ids"].shape[1]
    # the audio deltas are the whole answer's codes decoded at once
    codes = stream.speech.all_codes()
    with torch.inference_mode():
        whole = pipe.model.code2wav(codes[None].long())[0, 0].numpy()
    assert audio.shape == whole.shape
    np.testing.assert_allclose(audio, whole, atol=AUDIO_ATOL, rtol=0)


def test_concurrent_requests_answer_as_alone(pipe: Any) -> None:
    requests = [
        _request(pipe, CONVERSATIONS["text"], audio=True),
        # the same prompt length: prefilled with the one above in one forward, talker too
        _request(pipe, CONVERSATIONS["text"], audio=True, temperature=0.7, seed=11),
        _request(pipe, CONVERSATIONS["image"], audio=True, temperature=0.8, seed=7),
        _request(pipe, CONVERSATIONS["audio"], audio=True, temperature=0.9, seed=3),
        _request(pipe, CONVERSATIONS["system+turns"], audio=False),
    ]
    alone = [_answer(pipe.open(r)) for r in requests]
    assert alone[1][1] != alone[0][1]  # the seeded sampled answer is not the greedy one
    runtime = pipe.shared_runtime()
    steps, rows = runtime.steps, runtime.rows
    streams = [pipe.open(r) for r in requests]
    together = [[] for _ in streams]
    while not all(s.done for s in streams):
        runtime.step()
        for out, stream in zip(together, streams, strict=True):
            out.extend(stream.poll())
    assert (runtime.rows - rows) / (runtime.steps - steps) > 2  # thinker steps were shared
    for (deltas, ids, audio), stream, got in zip(alone, streams, together, strict=True):
        assert list(stream.ids) == ids
        assert "".join(d.text for d in got) == "".join(d.text for d in deltas)
        pieces = [d.audio.samples for d in got if d.audio is not None]
        joined = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        assert joined.shape == audio.shape
        np.testing.assert_allclose(joined, audio, atol=AUDIO_ATOL, rtol=0)


def test_seeded_answers_share_code2wav_calls_under_batch_seeded(pipe: Any) -> None:
    """code2wav says ``batches_seeded`` (it draws no noise): with the runtime's seeded batching
    on (what ``--batch-seeded`` does) two seeded answers opened together share code2wav calls,
    and each answer's audio is still its audio alone."""
    requests = [
        _request(pipe, CONVERSATIONS["text"], audio=True, temperature=0.7, seed=s, stream=True)
        for s in (11, 12)
    ]
    alone = [_answer(pipe.open(r))[2] for r in requests]
    runtime = pipe.shared_runtime()
    codec = runtime.speech_chain.stages.codec
    rows: list[int] = []

    def counted(codes: Any, context: int) -> Any:
        rows.append(codes.shape[0])
        return type(codec).decode(codec, codes, context)

    runtime.allow_seeded_batches(True)
    codec.decode = counted  # type: ignore[method-assign]
    try:
        streams = [pipe.open(r) for r in requests]
        got: list[list[Any]] = [[] for _ in streams]
        while not all(s.done for s in streams):
            runtime.step()
            for out, stream in zip(got, streams, strict=True):
                out.extend(stream.poll())
    finally:
        del codec.decode
        runtime.allow_seeded_batches(False)
    assert max(rows) == 2  # chunks of both answers in one call
    for deltas, audio in zip(got, alone, strict=True):
        joined = np.concatenate([d.audio.samples for d in deltas if d.audio is not None])
        assert joined.shape == audio.shape
        np.testing.assert_allclose(joined, audio, atol=AUDIO_ATOL, rtol=0)


def test_code2wav_chunks_converge_with_left_context(pipe: Any) -> None:
    """Chunked decoding joins into exactly the whole decode's length; its values approach the
    whole decode as left context grows and equal it once the context reaches the start. (On
    these random weights code2wav's two 72-frame sliding-window layers reach far back, so 25
    frames of context leave a large error here; the measured figures are in the report.)"""
    from omni_qwen.omni.qwen3_talker import Code2WavStage

    code2wav = pipe.model.code2wav
    codes = torch.randint(0, 32, (1, 8, 60), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        whole = code2wav(codes)[0, 0]
        errors = {}
        for left in (1, 25, 72):
            stage = Code2WavStage(code2wav, left)
            pieces, start = [], 0
            while start < codes.shape[-1]:
                end = min(start + 12, codes.shape[-1])
                context = min(left, start)
                pieces.append(stage.decode(codes[..., start - context : end], context)[0])
                start = end
            joined = torch.cat(pieces)
            assert joined.shape == whole.shape
            errors[left] = float((joined - whole).abs().max())
    assert errors[72] < 1e-4  # 60 frames: 72 frames of context reach the start
    assert errors[1] > errors[25] > errors[72]


def test_text_only_loading(checkpoint: Path, pipe: Any) -> None:
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    text_only = Qwen3OmniPipeline.from_pretrained(checkpoint, _options(audio_output="false"))
    assert not hasattr(text_only.model, "talker") and not hasattr(text_only.model, "code2wav")
    assert text_only.output_modalities == ("text",)
    assert text_only.voices() == []
    with pytest.raises(InvalidRequestError, match="without its speech chain"):
        _request(text_only, CONVERSATIONS["text"], audio=True)
    _, ids, _ = _answer(text_only.open(_request(text_only, CONVERSATIONS["text"], audio=False)))
    _, full_ids, _ = _answer(pipe.open(_request(pipe, CONVERSATIONS["text"], audio=False)))
    assert ids == full_ids
    # transformers' config name works too
    alias = Qwen3OmniPipeline.from_pretrained(checkpoint, _options(enable_audio_output=False))
    assert alias.output_modalities == ("text",)


def test_experts_option_sets_the_implementation(checkpoint: Path, pipe: Any) -> None:
    """``experts`` picks transformers' MoE experts implementation for the whole model; the
    answer is the same, and an unknown name is a ConfigError naming the key."""
    from omni_core import ConfigError
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    batched = Qwen3OmniPipeline.from_pretrained(checkpoint, _options(experts="batched_mm"))
    for config in (batched.model.thinker.config.text_config, batched.model.talker.config):
        assert config._experts_implementation == "batched_mm"
    _, ids, _ = _answer(batched.open(_request(batched, CONVERSATIONS["text"], audio=False)))
    _, base_ids, _ = _answer(pipe.open(_request(pipe, CONVERSATIONS["text"], audio=False)))
    assert ids == base_ids
    with pytest.raises(ConfigError, match="experts='no-such'"):
        Qwen3OmniPipeline(batched.model, batched.processor, False, _options(experts="no-such"),
                          checkpoint)  # fmt: skip


def test_fused_norms_answer_equals_generate(checkpoint: Path, reference: Any) -> None:
    """``fused_norms=on`` (opt-in) runs torch's fused rms_norm in every norm of the
    model's classes; the answer still equals transformers' generate() (text, and audio within
    1e-4), and ``off`` gives the norms transformers' own forward back."""
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    options = _options(left_context=4096, first_chunk_frames=2, chunk_frames=3, fused_norms="on")
    fused = Qwen3OmniPipeline.from_pretrained(checkpoint, options)
    assert fused.fused_norms > 0
    messages = CONVERSATIONS["system+turns"]
    _, ids, audio = _answer(fused.open(_request(fused, messages, audio=True)))
    want_ids, want_audio = _generate(fused, reference, messages, audio=True)
    assert ids == want_ids
    assert audio.shape == want_audio.shape
    assert np.abs(audio - want_audio).max() < AUDIO_ATOL
    plain = Qwen3OmniPipeline(fused.model, fused.processor, False, _options(), checkpoint)
    assert plain.fused_norms == 0
    assert all("forward" not in m.__dict__ for m in fused.model.modules())


def test_voices_are_the_speakers(pipe: Any) -> None:
    from omni_qwen.testing.qwen3_omni import SPEAKERS

    assert sorted(v.id for v in pipe.voices()) == sorted(SPEAKERS)
    request = _request(pipe, CONVERSATIONS["text"], audio=True, voice="Chelsie")
    assert request.voice == "chelsie"
    with pytest.raises(InvalidRequestError, match="unknown voice"):
        _request(pipe, CONVERSATIONS["text"], audio=True, voice="nobody")
