"""Small audio helpers in torch: a Slaney mel filterbank, the speaker encoder's log-mel, and
reference audio at the rate a model reads (:func:`to_rate`).

The filterbank follows the usual Slaney definition (linear below 1 kHz, logarithmic above, each
triangle area-normalised), the one librosa's ``filters.mel`` computes by default, so no librosa is
needed. Resampling is omni-core's (:func:`omni_core.speech.resample`, the one every speech
pipeline's output goes through); it is not bit-identical to any particular library's resampler.
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


def to_rate(wav: torch.Tensor | np.ndarray, orig_sr: int, target_sr: int) -> torch.Tensor:
    """A mono waveform (tensor or array, any shape) as a float32 tensor [N] at ``target_sr``,
    resampled by omni-core's resampler (:func:`omni_core.speech.resample`) when the rates differ."""
    wav = torch.as_tensor(wav, dtype=torch.float32).reshape(-1)
    if int(orig_sr) == int(target_sr):
        return wav
    from omni_core.speech import resample

    return torch.from_numpy(resample(wav.cpu().numpy(), int(orig_sr), int(target_sr)))
