"""A voiced signal Silero VAD detects as speech, made here (no recording in the repository):
a glottal pulse train (pitch gliding around 140 Hz) shaped by the formants of five vowels, one
syllable per 220 ms. Silero scores it above 0.9 (its onset 0.6-0.8) and steady noise or silence
under 0.1, so the server-VAD tests drive the real VAD, deterministically."""

from __future__ import annotations

import numpy as np

RATE = 24000
_VOWELS = [(730, 1090, 2440), (270, 2290, 3010), (570, 840, 2410), (300, 870, 2240)]


def voiced(seconds: float, seed: int = 0) -> np.ndarray:
    """float32 mono at 24 kHz, peak 0.3."""
    n = int(seconds * RATE)
    t = np.arange(n) / RATE
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t) + 10 * np.sin(2 * np.pi * 3.1 * t)
    phase = np.cumsum(f0 / RATE)
    source = sum(np.sin(2 * np.pi * k * phase) / k**1.5 for k in range(1, 40))
    out = np.zeros(n)
    syllable = int(0.22 * RATE)
    for start in range(0, n, syllable):
        formants = _VOWELS[(start // syllable + seed) % len(_VOWELS)]
        segment = source[start : start + syllable]
        freqs = np.fft.rfftfreq(len(segment), 1 / RATE)
        envelope = sum(1 / (1 + ((freqs - f) / (60 + f * 0.05)) ** 2) for f in formants)
        shaped = np.fft.irfft(np.fft.rfft(segment) * envelope, len(segment))
        out[start : start + syllable] = (
            shaped * np.sin(np.pi * np.arange(len(segment)) / len(segment)) ** 0.5
        )
    out += 0.002 * np.random.default_rng(seed).standard_normal(n)
    return (0.3 * out / np.abs(out).max()).astype(np.float32)


def pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)
