"""The 12 Hz speech tokenizer and the speaker encoder: shapes, streaming decode with left context
against whole decoding, encoding, resampling, x-vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from omni_qwen.tts.audio import log_mel, mel_filterbank, to_rate

# Decoding new frames with C frames of left context equals decoding everything once C covers the
# decoder's receptive field (the tiny decoder's is under 20 frames); the float tolerance:
CHUNK_ATOL = 1e-5


def _codes(frames: int, seed: int = 0, batch: int | None = None) -> torch.Tensor:
    shape = (16, frames) if batch is None else (batch, 16, frames)
    return torch.randint(0, 64, shape, generator=torch.Generator().manual_seed(seed))


@torch.inference_mode()
def test_decode_shapes(qwen3_tts) -> None:
    codec = qwen3_tts["custom_voice"].codec
    wav = codec.decode(_codes(7))
    assert wav.shape == (7 * 1920,) and wav.dtype == torch.float32
    assert float(wav.abs().max()) <= 1.0 and float(wav.abs().mean()) > 0
    batch = codec.decode(_codes(5, batch=3))
    assert batch.shape == (3, 5 * 1920)
    torch.testing.assert_close(batch[1], codec.decode(_codes(5, batch=3)[1]), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="expected 16 codebooks"):
        codec.decoder(_codes(4)[None, :15])


@torch.inference_mode()
def test_streamed_chunks_with_left_context_equal_whole_decoding(qwen3_tts) -> None:
    codec = qwen3_tts["custom_voice"].codec
    codes = _codes(36, seed=1)[None]
    whole = codec.decoder(codes)[:, 0]
    context, step = 20, 6
    pieces = []
    for start in range(0, 36, step):
        left = min(context, start)
        pieces.append(codec.decode_chunk(codes[..., start - left : start + step], context=left))
    streamed = torch.cat(pieces, dim=-1)
    assert streamed.shape == whole.shape
    torch.testing.assert_close(streamed, whole, rtol=0, atol=CHUNK_ATOL)
    # without enough left context the seams differ: the test above is not vacuous
    blind = torch.cat(
        [codec.decode_chunk(codes[..., s : s + step], context=0) for s in range(0, 36, step)], -1
    )
    assert float((blind - whole).abs().max()) > 1e-3


@torch.inference_mode()
def test_official_chunking_of_long_utterances(qwen3_tts) -> None:
    codec = qwen3_tts["custom_voice"].codec
    codes = _codes(50, seed=2)[None]
    # decode() cuts utterances in 300-frame chunks with 25 frames of context; the same loop, smaller
    chunked = codec.decoder.chunked(codes, chunk_size=16, left_context=20)
    torch.testing.assert_close(chunked, codec.decoder(codes), rtol=0, atol=CHUNK_ATOL)


@torch.inference_mode()
def test_encode_shapes_and_resampling(qwen3_tts) -> None:
    codec = qwen3_tts["base"].codec
    rng = np.random.default_rng(0)
    wav = (0.1 * rng.standard_normal(24000 + 500)).astype(np.float32)
    codes = codec.encode(wav, 24000)
    assert codes.shape == (16, math.ceil((24000 + 500) / 1920))
    assert codes.dtype == torch.long and int(codes.min()) >= 0 and int(codes.max()) < 64
    assert torch.equal(codec.encode(wav, 24000), codes)
    low = codec.encode(wav[:16000], 16000)  # 1 s at 16 kHz -> 24000 samples -> 13 frames
    assert low.shape == (16, 13)
    assert not torch.equal(codes[:, :5], codec.encode(wav[::-1].copy(), 24000)[:, :5])


def test_reference_audio_is_resampled_by_the_core_and_keeps_a_tone() -> None:
    from omni_core.speech import resample

    t = torch.arange(16000, dtype=torch.float64) / 16000
    tone = torch.sin(2 * math.pi * 440 * t).float()
    up = to_rate(tone, 16000, 24000)
    assert up.shape == (24000,) and up.dtype == torch.float32
    np.testing.assert_array_equal(up.numpy(), resample(tone.numpy(), 16000, 24000))
    expected = torch.sin(
        2 * math.pi * 440 * torch.arange(24000, dtype=torch.float64) / 24000
    ).float()
    torch.testing.assert_close(up[200:-200], expected[200:-200], rtol=0, atol=2e-2)
    down = to_rate(up, 24000, 16000)
    torch.testing.assert_close(down[200:-200], tone[200:-200], rtol=0, atol=2e-2)
    assert torch.equal(to_rate(tone, 16000, 16000), tone)  # the model's own rate: untouched
    assert torch.equal(to_rate(tone.double().numpy(), 16000, 16000), tone)


def test_mel_filterbank_is_slaney_normalised() -> None:
    bank = mel_filterbank(24000, 1024, 128, 0.0, 12000.0)
    assert bank.shape == (128, 513) and bank.dtype == np.float32
    assert (bank >= 0).all() and (bank.sum(axis=1) > 0).all()
    freqs = np.linspace(0, 12000, 513)
    # Slaney normalisation: each triangle's area (in Hz) is 1
    areas = bank.sum(axis=1) * (freqs[1] - freqs[0])
    assert np.allclose(areas[16:], 1.0, rtol=0.1)
    peaks = freqs[bank.argmax(axis=1)]
    assert (np.diff(peaks) >= 0).all() and peaks[-1] > 10000
    mel = log_mel(torch.zeros(1, 24000))
    assert mel.shape == (1, 128, 24000 // 256) and torch.allclose(
        mel, torch.log(torch.tensor(1e-5)), atol=1e-3
    )


@torch.inference_mode()
def test_speaker_embedding(qwen3_tts) -> None:
    encoder = qwen3_tts["base"].speaker_encoder
    t = np.arange(36000) / 24000
    a = (0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32)
    b = (0.3 * np.sign(np.sin(2 * np.pi * 300 * t))).astype(np.float32)
    ea, eb = encoder.embed(a, 24000), encoder.embed(b, 24000)
    assert ea.shape == (32,) and torch.isfinite(ea).all()
    torch.testing.assert_close(encoder.embed(a, 24000), ea, rtol=0, atol=0)
    assert float((ea - eb).abs().max()) > 1e-3
    at_16k = encoder.embed(a[::3][: 12000 * 2 // 2], 8000)  # any rate is resampled to 24 kHz
    assert at_16k.shape == (32,)
    assert float(torch.nn.functional.cosine_similarity(at_16k, ea, dim=0)) > 0.9
