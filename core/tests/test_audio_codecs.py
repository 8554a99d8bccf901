"""omni_core.media: encoders round-trip, resampling, speed, atomic writes (numpy only, no torch)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from omni_core.contract.errors import InvalidRequestError
from omni_core.media import audio as codecs
from omni_core.media import dsp
from omni_core.speech import pipeline as speech_base


def _tone(rate: int = 22050, seconds: float = 1.0, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


# -- encoders ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac"])
def test_audio_lossless_roundtrip(fmt: str) -> None:
    x = _tone()
    data = codecs.encode_audio(x, 22050, fmt)
    y, rate = codecs.decode_audio(data, fmt, sample_rate=22050)
    assert rate == 22050 and len(y) == len(x)
    # 16-bit quantisation is the only loss.
    assert np.abs(y - x).max() <= 1.0 / 32767 + 1e-6
    assert np.array_equal(codecs.to_int16(y), codecs.to_int16(x))


def test_audio_headers() -> None:
    x = _tone(seconds=0.2)
    assert codecs.encode_audio(x, 22050, "wav")[:4] == b"RIFF"
    assert codecs.encode_audio(x, 22050, "flac")[:4] == b"fLaC"
    mp3 = codecs.encode_audio(x, 22050, "mp3")
    assert mp3[:3] == b"ID3" or mp3[0] == 0xFF
    assert len(codecs.encode_audio(x, 22050, "pcm")) == 2 * len(x)


def test_audio_mp3_roundtrip_keeps_pitch_and_level() -> None:
    x = _tone(rate=24000, seconds=1.0)
    y, rate = codecs.decode_audio(codecs.encode_audio(x, 24000, "mp3"), "mp3")
    assert rate == 24000
    assert abs(len(y) - len(x)) < 2500  # encoder delay / padding only
    assert abs(_peak_hz(y, rate) - 440) < 3
    rms_x, rms_y = np.sqrt(np.mean(x**2)), np.sqrt(np.mean(y**2))
    assert abs(rms_y / rms_x - 1) < 0.1


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3"])
def test_audio_stream_encoder_roundtrip(fmt: str) -> None:
    x = _tone(rate=24000, seconds=1.0)
    enc = codecs.StreamEncoder(fmt, 24000)
    data = b"".join(enc.encode(x[i : i + 3001]) for i in range(0, len(x), 3001)) + enc.close()
    y, rate = codecs.decode_audio(data, fmt, sample_rate=24000)
    assert rate == 24000
    if fmt == "mp3":
        assert abs(_peak_hz(y, rate) - 440) < 3 and abs(len(y) - len(x)) < 2500
    else:
        assert len(y) == len(x)
        assert np.abs(y - x).max() <= 1.0 / 32767 + 1e-6
    if fmt == "pcm":
        assert data == codecs.encode_audio(x, 24000, "pcm")


def test_audio_write_is_atomic(tmp_path, monkeypatch) -> None:
    target = tmp_path / "out" / "a.flac"
    codecs.write_audio(target, _tone(), 22050)
    y, _ = codecs.decode_audio(target.read_bytes(), "flac")
    assert len(y) == 22050
    assert oct(target.stat().st_mode & 0o777) != "0o600"  # umask-respecting, not mkstemp's
    # A failure while writing leaves the old file intact and no temp file behind.
    before = target.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        codecs.write_audio(target, _tone(freq=880), 22050)
    assert target.read_bytes() == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.flac"]


def test_audio_bad_format_writes_nothing(tmp_path) -> None:
    with pytest.raises(InvalidRequestError) as err:
        codecs.write_audio(tmp_path / "a.ogg", _tone(), 22050)
    assert err.value.param == "response_format"
    with pytest.raises(InvalidRequestError) as err:
        codecs.encode_audio(_tone(), 22050, "aiff")
    assert err.value.param == "response_format"
    assert list(tmp_path.iterdir()) == []


# -- request checks ------------------------------------------------------------------------


def test_audio_request_checks() -> None:
    assert speech_base.check_text("  hi  ") == "hi"
    for bad in ("", "   \n"):
        with pytest.raises(InvalidRequestError) as err:
            speech_base.check_text(bad)
        assert err.value.param == "input"
    with pytest.raises(InvalidRequestError, match="limit is 4096"):
        speech_base.check_text("a" * (speech_base.MAX_TEXT_CHARS + 1))
    assert speech_base.check_text("a" * speech_base.MAX_TEXT_CHARS)
    for bad_rate in (1234, 96000, 0):
        with pytest.raises(InvalidRequestError) as err:
            codecs.check_sample_rate(bad_rate)
        assert err.value.param == "sample_rate"
    assert codecs.check_sample_rate(None) is None
    with pytest.raises(InvalidRequestError) as err:
        speech_base.check_voice("bob", [])
    assert err.value.param == "voice"
    assert codecs.format_for_path("x.MP3") == "mp3"
    assert codecs.format_for_path("x") == "wav"
    assert codecs.format_for_path("x.raw") == "pcm"


def test_audio_split_sentences() -> None:
    text = "Hello there. How are you?  Fine!\nNext line"
    assert speech_base.split_sentences(text) == [
        "Hello there.",
        "How are you?",
        "Fine!",
        "Next line",
    ]
    long = " ".join(["word"] * 300)
    parts = speech_base.split_sentences(long, max_chars=100)
    assert all(len(p) <= 100 for p in parts) and " ".join(parts) == long


# -- resampling ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "orig,target", [(22050, 24000), (24000, 16000), (16000, 48000), (22050, 8000), (24000, 24000)]
)
def test_audio_resample_stream_equals_oneshot(orig: int, target: int) -> None:
    x = np.random.default_rng(0).standard_normal(orig // 2).astype(np.float32) * 0.1
    whole = dsp.resample(x, orig, target)
    assert len(whole) == -(-len(x) * target // orig)
    for step in (1, 97, 1000, len(x)):
        r = dsp.StreamingResampler(orig, target)
        parts = [r.process(x[i : i + step]) for i in range(0, len(x), step)] + [r.flush()]
        assert np.array_equal(np.concatenate(parts), whole)


def test_audio_resample_keeps_tone() -> None:
    y = dsp.resample(_tone(22050, 1.0, 1000.0), 22050, 16000)
    assert len(y) == 16000
    assert abs(_peak_hz(y, 16000) - 1000) < 2
    assert abs(np.abs(y[500:-500]).max() - 0.5) < 0.01
    # Content above the new Nyquist is filtered out, not aliased.
    high = dsp.resample(_tone(48000, 1.0, 15000.0), 48000, 16000)
    assert np.sqrt(np.mean(high[500:-500] ** 2)) < 0.01


# -- speed ---------------------------------------------------------------------------------


@pytest.mark.parametrize("speed", [0.25, 0.5, 1.5, 2.0, 4.0])
def test_audio_speed_changes_duration_not_pitch(speed: float) -> None:
    x = _tone(22050, 2.0, 440.0)
    y = dsp.change_speed(x, 22050, speed)
    # atempo works in ~10 ms frames: within 2% + 30 ms of the exact stretch.
    assert abs(len(y) / 22050 - 2.0 / speed) < 0.02 * 2.0 / speed + 0.03
    assert abs(_peak_hz(y, 22050) - 440) < 5


def test_audio_speed_streaming_equals_oneshot() -> None:
    x = np.random.default_rng(1).standard_normal(30000).astype(np.float32) * 0.1
    whole = dsp.change_speed(x, 22050, 1.5)
    t = dsp.StreamingTempo(22050, 1.5)
    parts = [t.process(x[i : i + 1234]) for i in range(0, len(x), 1234)] + [t.flush()]
    assert np.array_equal(np.concatenate(parts), whole)
    with pytest.raises(InvalidRequestError):
        dsp.StreamingTempo(22050, 5.0)
