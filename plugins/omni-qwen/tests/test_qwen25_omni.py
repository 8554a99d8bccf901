"""Qwen2.5-Omni on omni's chat runtime against transformers' own ``generate`` on a tiny random
checkpoint in the official layout: greedy text token for token (text only; with an image and an
audio part), the audio of a non-streamed answer (talker greedy, same repetition penalty, same
token2wav noise seed), streamed deltas that make the whole answer, two concurrent answers equal
to each alone, and loading without the talker."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from omni_core import InvalidRequestError, Omni
from omni_core.chat import ChatMessage, ChatPart

TALKER_FRAMES = 24
#: Whole-answer audio vs transformers (same codes, same DiT noise, float32 on CPU), relative
#: to the reference's peak; measured: 4e-4 (float32 rounding through the ODE's 10 RK4 steps).
AUDIO_RTOL = 1e-3


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from omni_qwen.testing import build_tiny_qwen25_omni

    return build_tiny_qwen25_omni(tmp_path_factory.mktemp("qwen25-omni") / "tiny")


@pytest.fixture(scope="module")
def omni(checkpoint: Any) -> Omni:
    return Omni(checkpoint, device="cpu", talker_max_frames=TALKER_FRAMES, talker_sample="off")


@pytest.fixture(scope="module")
def reference(checkpoint: Any) -> Any:
    from transformers import Qwen2_5OmniForConditionalGeneration

    return Qwen2_5OmniForConditionalGeneration.from_pretrained(checkpoint).eval()


def _image() -> Any:
    from PIL import Image

    rng = np.random.default_rng(3)
    return Image.fromarray((rng.random((60, 80, 3)) * 255).astype(np.uint8))


def _audio() -> tuple[np.ndarray, int]:
    t = np.arange(24000) / 24000.0
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 24000


def _messages(kind: str) -> list[ChatMessage]:
    if kind == "text":
        return [ChatMessage.text("user", "hello world, the sound")]
    wav, rate = _audio()
    parts = [
        ChatPart(kind="image", image=_image()),
        ChatPart(kind="audio", audio=wav, sample_rate=rate),
        ChatPart(kind="text", text="the image and the sound"),
    ]
    return [ChatMessage.text("system", "hello"), ChatMessage(role="user", parts=parts)]


def _run(omni: Omni, messages: list[ChatMessage], **fields: Any) -> tuple[Any, list]:
    pipeline = omni.pipeline
    request = pipeline.validate(omni.request(messages=messages, **fields))
    stream = pipeline.open(request)
    deltas = list(stream)
    return stream, deltas


def _reference(omni: Omni, model: Any, messages: list[ChatMessage], audio: bool, tokens: int):
    """transformers' generate on the very processor output our pipeline builds."""
    from omni_qwen.omni.messages import to_processor_inputs
    from omni_qwen.omni.qwen25_prompt import SYSTEM_PROMPT, processor_batch

    pipeline = omni.pipeline
    inputs = to_processor_inputs(messages, system_prompt=SYSTEM_PROMPT, sampling_rate=16000)
    batch = processor_batch(pipeline.processor, inputs)
    # pixel values go to the thinker only (generate passes un-prefixed extras to the talker too,
    # whose generate refuses them); the image grid stays shared (the talker's positions need it)
    kwargs = {("thinker_" + k if k.startswith("pixel_values") else k): v for k, v in batch.items()}
    torch.manual_seed(0)  # token2wav's noise: the first draw after this (both sides seed 0)
    out = model.generate(
        **kwargs,
        speaker="Chelsie",
        generation_mode="audio" if audio else "text",
        thinker_max_new_tokens=tokens,
        thinker_do_sample=False,
        thinker_eos_token_id=pipeline.stop_ids,
        talker_do_sample=False,
        talker_max_new_tokens=TALKER_FRAMES,
    )
    sequences = out[0] if audio else out
    ids = sequences[0, batch["input_ids"].shape[1] :].tolist()
    for i, token in enumerate(ids):
        if token in pipeline.stop_ids:
            ids = ids[:i]
            break
    return ids, (out[1].numpy() if audio else None)


def _audio_of(deltas: list) -> np.ndarray:
    pieces = [d.audio.samples for d in deltas if d.audio is not None]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


@pytest.mark.parametrize("kind", ["text", "media"])
def test_greedy_text_equals_transformers(omni: Omni, reference: Any, kind: str) -> None:
    messages = _messages(kind)
    stream, deltas = _run(omni, messages, max_tokens=16, temperature=0)
    expected, _ = _reference(omni, reference, messages, audio=False, tokens=16)
    assert stream.ids == expected
    text = "".join(d.text for d in deltas)
    assert text == omni.pipeline.tokenizer.decode(expected, skip_special_tokens=True)
    last = deltas[-1]
    assert last.finish_reason in ("stop", "length") and last.usage is not None
    assert last.usage.completion_tokens == len(expected)
    assert last.usage.prompt_tokens == stream.state.prompt_tokens > 10


@pytest.mark.parametrize("kind", ["text", "media"])
def test_whole_answer_audio_equals_transformers(omni: Omni, reference: Any, kind: str) -> None:
    messages = _messages(kind)
    stream, deltas = _run(
        omni, messages, max_tokens=10, temperature=0, modalities=("text", "audio"), seed=0
    )
    ids, wav = _reference(omni, reference, messages, audio=True, tokens=10)
    assert stream.ids == ids
    ours = _audio_of(deltas)
    assert ours.shape == wav.shape and ours.size > 0
    assert np.sqrt(np.mean(wav**2)) > 1e-2  # audible: the comparison means something
    assert np.abs(ours - wav).max() <= AUDIO_RTOL * np.abs(wav).max()
    assert sum(d.audio is not None for d in deltas) == 1  # one decode of the whole answer


def test_streamed_deltas_make_the_whole_answer(omni: Omni, checkpoint: Any) -> None:
    """Text deltas concatenate to the answer; a streamed answer's token2wav chunks make several
    audio deltas (a non-streamed one on the same model: one, the whole decode),
    whose concatenation has the whole decode's length. It is not the same waveform (each
    chunk's DiT noise and look-ahead differ): the difference measured here is stated in the
    pipeline docs."""
    messages = _messages("text")
    fields = {"max_tokens": 10, "temperature": 0, "modalities": ("text", "audio"), "seed": 0}
    whole_stream, whole = _run(omni, messages, **fields)
    chunked = Omni(
        checkpoint,
        device="cpu",
        talker_max_frames=TALKER_FRAMES,
        talker_sample="off",
        audio_chunk_frames=6,
        audio_left_context=12,
    )
    stream, deltas = _run(chunked, messages, **fields, stream=True)  # streamed: in chunks
    assert stream.ids == whole_stream.ids
    assert sum(d.audio is not None for d in _run(chunked, messages, **fields)[1]) == 1
    assert "".join(d.text for d in deltas) == "".join(d.text for d in whole)
    ours, full = _audio_of(deltas), _audio_of(whole)
    assert sum(d.audio is not None for d in deltas) >= 2
    assert ours.shape == full.shape
    rel = float(np.sqrt(np.mean((ours - full) ** 2)) / np.sqrt(np.mean(full**2)))
    # measured on this checkpoint (6-code chunks, 12 codes of left context): 0.33 relative RMS
    # difference (0.17 with 12-code chunks and 24 of context; chunks of the whole answer: 0)
    assert 0.0 < rel < 0.45, rel


def test_concurrent_answers_equal_each_alone(omni: Omni) -> None:
    """Two prompts of one length (prefilled in one forward), one with media, one sampled with a
    seed: together, each answers as it does alone (text ids and audio)."""
    pipeline = omni.pipeline
    speech = {"max_tokens": 10, "modalities": ("text", "audio"), "seed": 0}
    cases = [
        ([ChatMessage.text("user", "hello world, the sound")], {**speech, "temperature": 0}),
        ([ChatMessage.text("user", "hello sound, the world")], {**speech, "temperature": 0}),
        (_messages("media"), {**speech, "temperature": 0, "voice": "Ethan"}),
        (_messages("text"), {"max_tokens": 12, "temperature": 0.9, "top_p": 0.9, "seed": 7}),
    ]
    alone = [_run(omni, messages, **fields) for messages, fields in cases]
    runtime = pipeline.shared_runtime()
    streams = [pipeline.open(pipeline.validate(omni.request(messages=m, **f))) for m, f in cases]
    deltas: list[list] = [[] for _ in cases]
    widths, rows = [], runtime.rows
    while not all(s.done for s in streams):
        widths.append(runtime.open_streams)
        runtime.step()
        for i, s in enumerate(streams):
            deltas[i].extend(s.poll())
    assert max(widths) == len(cases)
    assert runtime.rows - rows > len(widths)  # steps carried several rows
    for (stream, ref_deltas), together, mine in zip(alone, streams, deltas, strict=True):
        assert together.error is None
        assert together.ids == stream.ids
        assert "".join(d.text for d in mine) == "".join(d.text for d in ref_deltas)
        np.testing.assert_allclose(_audio_of(mine), _audio_of(ref_deltas), atol=1e-5)
    assert alone[0][0].ids != alone[1][0].ids  # the prompt steers the answer
    assert _audio_of(alone[2][1]).size > 0 and _audio_of(alone[3][1]).size == 0


def test_loaded_without_talker_answers_text_only(omni: Omni, checkpoint: Any) -> None:
    text_only = Omni(checkpoint, device="cpu", audio_output="off")
    pipeline = text_only.pipeline
    assert pipeline.output_modalities == ("text",)
    assert pipeline.voices() == []
    assert not hasattr(pipeline.model, "talker")
    with pytest.raises(InvalidRequestError, match="loaded without its speech chain"):
        pipeline.validate(
            text_only.request(messages=_messages("text"), modalities=("text", "audio"))
        )
    stream, deltas = _run(text_only, _messages("text"), max_tokens=12, temperature=0)
    full_stream, _ = _run(omni, _messages("text"), max_tokens=12, temperature=0)
    assert stream.ids == full_stream.ids
    assert all(d.audio is None for d in deltas)


def test_voices_and_bad_voice(omni: Omni) -> None:
    pipeline = omni.pipeline
    assert [v.id for v in pipeline.voices()] == ["Chelsie", "Ethan"]
    with pytest.raises(InvalidRequestError, match="unknown voice"):
        pipeline.validate(
            omni.request(messages=_messages("text"), modalities=("text", "audio"), voice="Bob")
        )


def test_video_parts_need_the_video_processor(omni: Omni) -> None:
    pipeline = omni.pipeline
    video = ChatPart(kind="video", video=np.zeros((4, 56, 56, 3), np.uint8), fps=2.0)
    messages = [ChatMessage(role="user", parts=[video, ChatPart(kind="text", text="what?")])]
    if pipeline.takes_videos:  # torchvision installed: the processor takes the frames
        assert pipeline.validate(omni.request(messages=messages)).messages == messages
    else:
        with pytest.raises(InvalidRequestError, match="torchvision"):
            omni.request(messages=messages)  # Omni.request validates


def test_token2wav_rows_in_one_batch_equal_each_row_alone(omni: Omni) -> None:
    """token2wav decodes the rows of one speaker in one batch (each row's noise from its own
    seed) and gives each row what decoding it alone gives; rows of two speakers split."""
    import torch

    runtime = omni.pipeline.shared_runtime()
    assert runtime.speech_chain is not None
    codec = runtime.speech_chain.stages.codec
    frames, vocab = 9, int(codec.token2wav.code2wav_dit_model.config.num_embeds)
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(0, vocab, (4, 3, frames), generator=generator)
    codes[:, 1] = torch.tensor([0, 0, 1, 0])[:, None]  # speaker index per row
    codes[:, 2] = torch.tensor([11, 12, 13, 11])[:, None]  # noise seed per row
    together = codec.decode(codes, context=3)
    alone = torch.cat([codec.decode(codes[row : row + 1], context=3) for row in range(4)])
    assert together.shape == (4, (frames - 3) * codec.samples_per_frame)
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(together[0], together[1])  # another seed, other noise


def test_token2wav_encodes_the_speaker_once_per_decode(omni: Omni) -> None:
    """The ECAPA speaker encoder runs once per decode (and speaker), not at each of the DiT's
    forwards as in transformers, and the audio is the same (same kernels, same input)."""
    import torch

    runtime = omni.pipeline.shared_runtime()
    assert runtime.speech_chain is not None
    codec = runtime.speech_chain.stages.codec
    frames, vocab = 9, int(codec.token2wav.code2wav_dit_model.config.num_embeds)
    codes = torch.randint(0, vocab, (3, 3, frames), generator=torch.Generator().manual_seed(1))
    codes[:, 1] = torch.tensor([0, 1, 0])[:, None]  # two speakers
    codes[:, 2] = torch.tensor([5, 6, 7])[:, None]
    encoder = codec.token2wav.code2wav_dit_model.input_embed.spk_encoder
    calls: list[int] = []  # the encoder's own forward ran (its first block did), on how many rows
    hook = encoder.blocks[0].register_forward_hook(lambda _m, a, _o: calls.append(a[0].shape[0]))
    fixed = codec.speaker_encoding
    try:
        once = codec.decode(codes, context=2)
        assert calls == [4, 2]  # [reference; zeros] for the two rows of speaker 0, then speaker 1
        fixed.enabled = False
        calls.clear()
        every = codec.decode(codes, context=2)
        forwards = len(calls)
    finally:
        fixed.enabled = True
        hook.remove()
    assert forwards == 2 * 4 * (codec.steps - 1)  # RK4: four per interval, per speaker
    torch.testing.assert_close(once, every, rtol=0, atol=0)


@pytest.mark.parametrize("gather", [1, 4])
def test_streamed_answers_started_apart_share_token2wav_calls(checkpoint: Any, gather: int) -> None:
    """Three seeded streamed answers that join 0, 1 and 3 steps apart: with
    ``audio_gather_steps=4`` their chunks are decoded in shared token2wav calls (fewer calls than
    chunks), with 1 each as soon as due; either way each answer's audio is its audio alone
    (its own chunk boundaries, its own noise)."""
    chunked = Omni(
        checkpoint,
        device="cpu",
        talker_max_frames=TALKER_FRAMES,
        talker_sample="off",
        audio_chunk_frames=6,
        audio_first_chunk_frames=3,
        audio_left_context=6,
        audio_gather_steps=gather,
    )
    pipeline = chunked.pipeline
    prompts = ["hello world, the sound", "hello sound, the world", "the world, hello sound"]
    fields = {"max_tokens": 10, "temperature": 0, "modalities": ("text", "audio"), "stream": True}
    cases = [([ChatMessage.text("user", p)], {**fields, "seed": i}) for i, p in enumerate(prompts)]
    alone = [_audio_of(_run(chunked, m, **f)[1]) for m, f in cases]
    runtime = pipeline.shared_runtime()
    assert runtime.speech_chain is not None
    runtime.allow_seeded_batches(True)  # what the engine does under --batch-seeded
    codec = runtime.speech_chain.stages.codec
    calls: list[int] = []

    def counted(codes: Any, context: int) -> Any:
        calls.append(codes.shape[0])
        return type(codec).decode(codec, codes, context)

    codec.decode = counted  # type: ignore[method-assign]
    try:
        streams, deltas = [], [[] for _ in cases]
        for step in range(400):
            if step in (0, 1, 3):
                m, f = cases[len(streams)]
                streams.append(pipeline.open(pipeline.validate(chunked.request(messages=m, **f))))
            runtime.step()
            for i, s in enumerate(streams):
                deltas[i].extend(s.poll())
            if len(streams) == len(cases) and all(s.done for s in streams):
                break
    finally:
        del codec.decode
    assert all(s.error is None for s in streams)
    chunks = sum(sum(d.audio is not None for d in mine) for mine in deltas)
    assert chunks >= 3 * 4 and sum(calls) == chunks
    if gather == 1:
        assert len(calls) > len(cases) * 3  # offsets keep most calls apart
    else:
        assert len(calls) <= chunks * 2 // 3 and max(calls) == len(cases), calls
    for mine, ref in zip(deltas, alone, strict=True):
        np.testing.assert_allclose(_audio_of(mine), ref, atol=1e-5)
