"""Qwen3-TTS prompts: the official row layout for each kind and mode, rebuilt here from the parts
(text rows, codec tag, speaker, pad/bos), and every request the model can't honour refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_qwen.tts import Qwen3TTSInputError


def _text_ids(model, text: str) -> list[int]:
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


def _codec(model, *ids: int) -> torch.Tensor:
    return model.talker.embed_codec(torch.tensor(ids))


def _tts(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    c = model.config
    rows = model.talker.embed_text(
        torch.tensor([[c.tts_bos_token_id, c.tts_eos_token_id, c.tts_pad_token_id]])
    )[0]
    return rows[0], rows[1], rows[2]


@torch.inference_mode()
def test_custom_voice_non_streaming_layout(qwen3_tts) -> None:
    model = qwen3_tts["custom_voice"]
    tc = model.config.talker
    prompt = model.build_prompt("hello world", speaker="serena", language="english")
    ids = _text_ids(model, "<|im_start|>assistant\nhello world<|im_end|>\n<|im_start|>assistant\n")
    text = ids[3:-5]
    bos, eos, pad = _tts(model)
    tag = [
        tc.codec_think_id,
        tc.codec_think_bos_id,
        tc.codec_language_id["english"],
        tc.codec_think_eos_id,
    ]
    codec = torch.cat(
        [_codec(model, *tag), _codec(model, tc.spk_id["serena"]), _codec(model, tc.codec_pad_id)]
    )
    expected = torch.cat(
        [
            model.talker.embed_text(torch.tensor(ids[:3])),  # <|im_start|>assistant\n
            torch.cat([pad.expand(len(tag) + 1, -1), bos[None]]) + codec,  # tag + speaker + pad
            torch.cat([model.talker.embed_text(torch.tensor(text)), eos[None]])
            + _codec(model, tc.codec_pad_id),
            pad[None] + _codec(model, tc.codec_bos_id),
        ]
    )
    assert prompt.embeds.shape == (3 + 6 + len(text) + 2, model.hidden_size)
    torch.testing.assert_close(prompt.embeds, expected, rtol=1e-5, atol=1e-6)
    assert prompt.trailing.shape[0] == 0 and prompt.ref_codes is None
    torch.testing.assert_close(prompt.pad, pad)
    torch.testing.assert_close(prompt.text_for_step(0), pad)


@torch.inference_mode()
def test_streaming_feeds_the_text_one_row_per_step(qwen3_tts) -> None:
    model = qwen3_tts["custom_voice"]
    prompt = model.build_prompt(
        "hello world", speaker="aiden", language="auto", non_streaming=False
    )
    ids = _text_ids(model, "<|im_start|>assistant\nhello world<|im_end|>\n<|im_start|>assistant\n")
    text = ids[3:-5]
    _, eos, pad = _tts(model)
    # auto: nothink, think_bos, think_eos (3 tag rows); then speaker, pad; first text token + bos
    assert prompt.embeds.shape[0] == 3 + 5 + 1
    tc = model.config.talker
    first = model.talker.embed_text(torch.tensor(text[:1]))[0] + _codec(model, tc.codec_bos_id)[0]
    torch.testing.assert_close(prompt.embeds[-1], first, rtol=1e-5, atol=1e-6)
    expected_trailing = torch.cat([model.talker.embed_text(torch.tensor(text[1:])), eos[None]])
    torch.testing.assert_close(prompt.trailing, expected_trailing, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(prompt.text_for_step(len(text)), pad)


@torch.inference_mode()
def test_instructions_come_first_and_dialects_pick_their_language(qwen3_tts) -> None:
    model = qwen3_tts["custom_voice"]
    plain = model.build_prompt("hello", speaker="aiden")
    styled = model.build_prompt("hello", speaker="aiden", instructions="whisper")
    instruct = _text_ids(model, "<|im_start|>user\nwhisper<|im_end|>\n")
    assert styled.embeds.shape[0] == plain.embeds.shape[0] + len(instruct)
    torch.testing.assert_close(styled.embeds[len(instruct) :], plain.embeds)
    torch.testing.assert_close(
        styled.embeds[: len(instruct)], model.talker.embed_text(torch.tensor(instruct))
    )
    builder = model._prompts
    tc = model.config.talker
    assert builder.language_id("auto", "uncle_fu") == tc.codec_language_id["beijing_dialect"]
    assert builder.language_id("chinese", "uncle_fu") == tc.codec_language_id["beijing_dialect"]
    assert builder.language_id("english", "uncle_fu") == tc.codec_language_id["english"]
    assert builder.language_id("auto", "aiden") is None
    assert builder.language_id("German", None) == tc.codec_language_id["german"]


@torch.inference_mode()
def test_voice_design_has_no_speaker_row(qwen3_tts) -> None:
    design = qwen3_tts["voice_design"].build_prompt(
        "hello", language="english", instructions="a calm voice"
    )
    custom = qwen3_tts["custom_voice"].build_prompt(
        "hello", speaker="aiden", language="english", instructions="a calm voice"
    )
    assert design.embeds.shape[0] == custom.embeds.shape[0] - 1


@torch.inference_mode()
def test_base_clone_prompts(qwen3_tts) -> None:
    model = qwen3_tts["base"]
    t = np.arange(24000) / 24000
    wav = (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    icl = model.prepare_voice(wav, 24000, ref_text="hello")
    assert icl.ref_codes.shape == (16, 13) and icl.speaker_embedding.shape == (32,)
    xvec = model.prepare_voice(wav, 24000, x_vector_only=True)
    assert xvec.x_vector_only and xvec.ref_codes is None
    torch.testing.assert_close(xvec.speaker_embedding, icl.speaker_embedding)

    prompt = model.build_prompt(
        "hello world", voice=icl, language="english"
    )  # Base defaults to streaming
    ref = _text_ids(model, "<|im_start|>assistant\nhello<|im_end|>\n")[3:-2]
    text = _text_ids(
        model, "<|im_start|>assistant\nhello world<|im_end|>\n<|im_start|>assistant\n"
    )[3:-5]
    n_text, n_codec = len(ref) + len(text) + 1, 13 + 1
    # the head (role, tag, x-vector, pad), then one ICL row per codec row (bos + reference frames),
    # the text lined up against them (tts_pad once it runs out); text beyond them trails
    assert prompt.embeds.shape[0] == 3 + 6 + n_codec
    assert prompt.trailing.shape[0] == max(n_text - n_codec, 0)
    assert torch.equal(prompt.ref_codes, icl.ref_codes)
    speaker_row = 3 + 4  # after role (3) and the 4-row language tag
    _, _, pad = _tts(model)
    torch.testing.assert_close(
        prompt.embeds[speaker_row], pad + icl.speaker_embedding, rtol=1e-5, atol=1e-6
    )

    short = model.prepare_voice(wav[:4800], 24000, ref_text="hello user")  # 3 frames
    long_text = "hello world, hello user"
    long_ids = _text_ids(
        model, f"<|im_start|>assistant\n{long_text}<|im_end|>\n<|im_start|>assistant\n"
    )[3:-5]
    ref_ids = _text_ids(model, "<|im_start|>assistant\nhello user<|im_end|>\n")[3:-2]
    lined = model.build_prompt(long_text, voice=short, language="english")
    assert lined.embeds.shape[0] == 3 + 6 + 4
    assert lined.trailing.shape[0] == len(ref_ids) + len(long_ids) + 1 - 4

    whole = model.build_prompt("hello world", voice=icl, language="english", non_streaming=True)
    assert whole.embeds.shape[0] == 3 + 6 + n_text + n_codec and whole.trailing.shape[0] == 0
    only = model.build_prompt("hello world", voice=xvec, language="english")
    assert only.ref_codes is None and only.embeds.shape[0] == 3 + 6 + 1


@pytest.mark.parametrize(
    ("name", "request_", "message"),
    [
        (
            "custom_voice",
            {"speaker": "nobody"},
            "unknown speaker 'nobody'; this model has: aiden, serena, uncle_fu",
        ),
        ("custom_voice", {}, "needs a speaker"),
        (
            "custom_voice",
            {"speaker": "aiden", "language": "klingon"},
            "language 'klingon' is not supported",
        ),
        (
            "custom_voice",
            {"speaker": "uncle_fu", "language": "beijing_dialect"},
            "language 'beijing_dialect' is not supported",
        ),
        (
            "custom_voice_0b6",
            {"speaker": "aiden", "instructions": "loud"},
            "0.6B CustomVoice model has none",
        ),
        ("base", {"instructions": "loud", "voice": "V"}, "Base models clone a voice"),
        ("base", {}, "needs a reference voice"),
        ("voice_design", {"speaker": "aiden"}, "no named speakers"),
        ("custom_voice", {"speaker": "aiden", "voice": "V"}, "needs a Base model"),
    ],
)
def test_requests_the_model_cannot_honour_are_refused(qwen3_tts, name, request_, message) -> None:
    model = qwen3_tts[name]
    request_ = dict(request_)
    if request_.get("voice") == "V":
        request_["voice"] = qwen3_tts["base"].prepare_voice(
            np.zeros(4800, np.float32), 24000, x_vector_only=True
        )
    with pytest.raises(Qwen3TTSInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model.build_prompt("hello", **request_)


def test_reference_audio_checks(qwen3_tts) -> None:
    base = qwen3_tts["base"]
    with pytest.raises(Qwen3TTSInputError, match="needs its transcript"):
        base.prepare_voice(np.zeros(24000, np.float32), 24000)
    with pytest.raises(Qwen3TTSInputError, match=r"shorter than 0\.1 s"):
        base.prepare_voice(np.zeros(100, np.float32), 24000, ref_text="hi")
    with pytest.raises(Qwen3TTSInputError, match="needs a Base model"):
        qwen3_tts["custom_voice"].prepare_voice(np.zeros(24000, np.float32), 24000, ref_text="hi")
    with pytest.raises(Qwen3TTSInputError, match="text is empty"):
        qwen3_tts["custom_voice"].build_prompt("  ", speaker="aiden")
