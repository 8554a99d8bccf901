"""``reference_generate`` and the step-by-step interface a runtime drives: determinism, the official
stopping and logits rules, and a batched, left-padded, 4D-masked drive of the public parts that
gives the reference's codes request for request."""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

from omni_qwen.tts import reference_generate
from omni_qwen.tts.reference import generate_codes


def _voice(model):
    t = np.arange(19200) / 24000
    return model.prepare_voice(
        (0.3 * np.sin(2 * np.pi * 210 * t)).astype(np.float32), 24000, ref_text="hello"
    )


def test_reference_is_deterministic_and_shaped(qwen3_tts) -> None:
    model = qwen3_tts["custom_voice"]
    first = reference_generate(
        model, "hello world", speaker="aiden", language="english", max_new_tokens=12
    )
    again = reference_generate(
        model, "hello world", speaker="aiden", language="english", max_new_tokens=12
    )
    assert torch.equal(first.codes, again.codes) and np.array_equal(first.wav, again.wav)
    frames = first.codes.shape[1]
    assert first.codes.shape[0] == 16 and 1 <= frames <= 11  # at most max_new_tokens - 1 frames
    assert first.codes.dtype == torch.long and int(first.codes.max()) < 64  # audio codes only
    assert (
        first.wav.shape == (frames * 1920,)
        and first.wav.dtype == np.float32
        and first.sample_rate == 24000
    )
    other = reference_generate(
        model, "hello world", speaker="serena", language="english", max_new_tokens=12
    )
    assert not torch.equal(other.codes[:, :3], first.codes[:, :3])


def test_base_clone_decodes_after_the_reference(qwen3_tts) -> None:
    model = qwen3_tts["base"]
    voice = _voice(model)
    out = reference_generate(
        model, "hello world", voice=voice, language="english", max_new_tokens=8
    )
    assert out.prompt.ref_codes is voice.ref_codes
    assert out.wav.shape == (out.codes.shape[1] * 1920,)
    full = model.codec.decode(torch.cat([voice.ref_codes, out.codes], dim=1))
    np.testing.assert_allclose(
        out.wav, full[voice.ref_codes.shape[1] * 1920 :].numpy(), rtol=0, atol=1e-6
    )


def test_codec0_logits_rules(qwen3_tts) -> None:
    model = qwen3_tts["custom_voice"]
    eos = model.codec_eos_id
    logits = torch.linspace(-2, 2, 1088).repeat(2, 1)
    seen = torch.zeros(2, 1088, dtype=torch.bool)
    seen[0, 3] = seen[0, 1000] = True
    scores = model.codec0_logits(logits, seen, torch.tensor([0, 5]), repetition_penalty=2.0)
    assert (
        torch.isinf(scores[:, 64:eos]).all() and torch.isinf(scores[:, eos + 1 :]).all()
    )  # control tokens
    assert (
        torch.isinf(scores[0, eos]) and scores[1, eos] == logits[1, eos]
    )  # no EOS before 2 tokens
    assert scores[0, 3] == logits[0, 3] * 2.0  # negative logits are multiplied by the penalty
    assert scores[1, 3] == logits[1, 3] and torch.equal(scores[:, :3], logits[:, :3])
    positive = model.codec0_logits(torch.full((1, 1088), 3.0), seen[:1], 4, repetition_penalty=1.5)
    assert positive[0, 3] == 2.0 and positive[0, 4] == 3.0


@torch.inference_mode()
def _drive_batched(model, prompts, max_new_tokens: int, penalty: float) -> list[torch.Tensor]:
    """What a runtime does, with the public parts only: left-padded batched prefill under a 4D
    mask and explicit positions, then batched decode steps on one cache, rows finishing apart."""
    batch = len(prompts)
    lengths = [p.embeds.shape[0] for p in prompts]
    width = max(lengths)
    embeds = torch.zeros(batch, width, model.hidden_size)
    valid = torch.zeros(batch, width, dtype=torch.bool)
    positions = torch.zeros(batch, width, dtype=torch.long)
    for i, prompt in enumerate(prompts):
        pad = width - lengths[i]
        embeds[i, pad:] = prompt.embeds
        valid[i, pad:] = True
        positions[i, pad:] = torch.arange(lengths[i])
    causal = torch.tril(torch.ones(width, width, dtype=torch.bool))
    mask = (causal[None] & valid[:, None, :])[:, None]
    cache = DynamicCache()
    hidden, logits = model.talker_forward(embeds, positions, mask, cache)
    hidden, logits = hidden[:, -1], logits[:, -1]
    seen = torch.zeros(logits.shape, dtype=torch.bool)
    done = torch.zeros(batch, dtype=torch.bool)
    frames: list[list[torch.Tensor]] = [[] for _ in prompts]
    for step in range(max_new_tokens):
        code0 = model.codec0_logits(logits, seen, step, penalty).argmax(-1)
        done |= (code0 == model.codec_eos_id) | (step == max_new_tokens - 1)
        if bool(done.all()):
            break
        seen.scatter_(1, code0[:, None], True)
        codes = model.predict_codes(hidden, code0)  # the inner loop, batched over the frames
        for i in range(batch):
            if not done[i]:
                frames[i].append(codes[i])
        text = torch.stack([p.text_for_step(step) for p in prompts])
        step_embeds = model.frame_embedding(codes, text)[:, None]
        valid = torch.cat([valid, torch.ones(batch, 1, dtype=torch.bool)], dim=1)
        step_positions = torch.tensor(lengths)[:, None] + step
        hidden, logits = model.talker_forward(
            step_embeds, step_positions, valid[:, None, None, :], cache
        )
        hidden, logits = hidden[:, -1], logits[:, -1]
    return [torch.stack(f, dim=1) if f else torch.zeros(16, 0, dtype=torch.long) for f in frames]


def test_a_batched_drive_of_the_parts_equals_the_reference(qwen3_tts) -> None:
    cv, base = qwen3_tts["custom_voice"], qwen3_tts["base"]
    requests = [
        dict(text="hello world", speaker="aiden", language="english"),
        dict(
            text="hello",
            speaker="uncle_fu",
            language="auto",
            instructions="whisper",
            non_streaming=False,
        ),
        dict(text="world hello world", speaker="serena", language="german", non_streaming=False),
    ]
    prompts = [cv.build_prompt(**r) for r in requests]
    expected = [generate_codes(cv, p, 14, 1.05) for p in prompts]
    got = _drive_batched(cv, prompts, 14, 1.05)
    for want, have in zip(expected, got, strict=True):
        assert torch.equal(want, have)
    assert len({c.shape[1] for c in expected}) > 1 or not torch.equal(expected[0], expected[1])

    voice = _voice(base)
    clone = [
        base.build_prompt("hello world", voice=voice),
        base.build_prompt("world", voice=voice, non_streaming=True),
    ]
    expected = [generate_codes(base, p, 10, 1.05) for p in clone]
    for want, have in zip(expected, _drive_batched(base, clone, 10, 1.05), strict=True):
        assert torch.equal(want, have)


@torch.inference_mode()
def test_code_predictor_batched_over_frames_equals_one_by_one(qwen3_tts) -> None:
    model = qwen3_tts["voice_design"]
    hidden = torch.randn(5, model.hidden_size, generator=torch.Generator().manual_seed(4))
    code0 = torch.tensor([1, 7, 7, 30, 63])
    together = model.predict_codes(hidden, code0)
    assert together.shape == (5, 16) and torch.equal(together[:, 0], code0)
    for i in range(5):
        assert torch.equal(model.predict_codes(hidden[i : i + 1], code0[i : i + 1])[0], together[i])
    sampled = model.predict_codes(
        hidden, code0, sampler=lambda logits, group: torch.full_like(code0, group)
    )
    assert torch.equal(sampled[0, 1:], torch.arange(1, 16))
