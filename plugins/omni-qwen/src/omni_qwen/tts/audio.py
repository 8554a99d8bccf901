"""Small audio helpers in torch: a Slaney mel filterbank, the speaker encoder's log-mel, resampling.

The filterbank follows the usual Slaney definition (linear below 1 kHz, logarithmic above, each
triangle area-normalised), the one librosa's ``filters.mel`` computes by default, so no librosa is
needed. Resampling is a windowed-sinc polyphase filter (Kaiser window), good for reference audio;
it is not bit-identical to any particular library's resampler.
"""

from __future__ import annotations

import math

import numpy as np
import torch

_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(freqs: np.ndarray) -> np.ndarray:
    freqs = np.asanyarray(freqs, dtype=np.float64)
    mels = freqs / _F_SP
    high = freqs >= _MIN_LOG_HZ
    return np.where(
        high, _MIN_LOG_MEL + np.log(np.maximum(freqs, 1e-10) / _MIN_LOG_HZ) / _LOGSTEP, mels
    )


def mel_to_hz(mels: np.ndarray) -> np.ndarray:
    mels = np.asanyarray(mels, dtype=np.float64)
    freqs = _F_SP * mels
    high = mels >= _MIN_LOG_MEL
    return np.where(high, _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels - _MIN_LOG_MEL)), freqs)


def mel_filterbank(
    sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None
) -> np.ndarray:
    """[n_mels, 1 + n_fft // 2] float32 Slaney-scale, Slaney-normalised triangular filters."""
    fmax = sr / 2.0 if fmax is None else fmax
    fft_freqs = np.linspace(0, sr / 2.0, 1 + n_fft // 2)
    mel_freqs = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(mel_freqs)
    ramps = mel_freqs[:, None] - fft_freqs[None, :]
    weights = np.zeros((n_mels, fft_freqs.size), dtype=np.float64)
    for i in range(n_mels):
        rising = -ramps[i] / widths[i]
        falling = ramps[i + 2] / widths[i + 1]
        weights[i] = np.maximum(0, np.minimum(rising, falling))
    weights *= (2.0 / (mel_freqs[2 : n_mels + 2] - mel_freqs[:n_mels]))[:, None]
    return weights.astype(np.float32)


def log_mel(
    wav: torch.Tensor,
    sr: int = 24000,
    n_fft: int = 1024,
    n_mels: int = 128,
    hop: int = 256,
    win: int = 1024,
    fmin: float = 0.0,
    fmax: float | None = 12000.0,
) -> torch.Tensor:
    """wav [B, N] -> log-mel [B, n_mels, frames]: reflect-padded STFT magnitude, mel filters,
    log(max(x, 1e-5))."""
    basis = torch.from_numpy(mel_filterbank(sr, n_fft, n_mels, fmin, fmax)).to(wav.device)
    window = torch.hann_window(win, device=wav.device)
    pad = (n_fft - hop) // 2
    wav = torch.nn.functional.pad(wav[:, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(
        wav, n_fft, hop_length=hop, win_length=win, window=window, center=False, return_complex=True
    )
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    return torch.log(torch.clamp(basis @ magnitude, min=1e-5))


def resample(wav: torch.Tensor, orig_sr: int, target_sr: int, taps: int = 32) -> torch.Tensor:
    """[..., N] -> [..., ceil(N * target / orig)] by a Kaiser-windowed sinc polyphase filter."""
    if orig_sr == target_sr:
        return wav
    g = math.gcd(int(orig_sr), int(target_sr))
    up, down = int(target_sr) // g, int(orig_sr) // g
    cutoff = min(1.0, up / down) * 0.97
    width = taps * max(up, down) // min(up, down) if up < down else taps
    # each output sample sits at a fractional input position; its taps are the sinc around it
    length = wav.shape[-1]
    out_len = math.ceil(length * up / down)
    positions = torch.arange(out_len, dtype=torch.float64) * down / up  # in input samples
    base = torch.floor(positions).long()
    offsets = torch.arange(-width + 1, width + 1)
    idx = base[:, None] + offsets[None, :]
    t = (idx.double() - positions[:, None]) * cutoff
    beta = 8.6
    window = torch.special.i0(
        beta * torch.sqrt(torch.clamp(1 - (t / (width * cutoff)) ** 2, min=0))
    ) / torch.special.i0(torch.tensor(beta, dtype=torch.float64))
    kernel = (cutoff * torch.sinc(t) * window).to(wav.dtype)
    valid = (idx >= 0) & (idx < length)
    gathered = wav[..., idx.clamp(0, length - 1)] * valid.to(wav.dtype)
    return (gathered * kernel.to(wav.device)).sum(-1)
