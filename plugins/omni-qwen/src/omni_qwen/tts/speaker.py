"""The Base model's speaker encoder: ECAPA-TDNN over a 128-bin log-mel -> one x-vector.

Desplanques et al. 2020 (arXiv 2005.07143): a TDNN layer, SE-Res2Net blocks, multi-layer feature
aggregation, attentive statistics pooling, a 1x1 conv to ``enc_dim``. Every conv is "same"-padded
with reflection. Module names follow the official ``speaker_encoder.*`` keys.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .config import SpeakerEncoderConfig


def _conv(cin: int, cout: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TDNN(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2Net(nn.Module):
    """Split channels in ``scale`` groups; group i > 0 goes through a TDNN after adding group
    i-1's output (group 1 alone); group 0 passes through."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(TDNN(width, width, kernel, dilation) for _ in range(scale - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs: list[torch.Tensor] = []
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                out = part
            elif i == 1:
                out = self.blocks[0](part)
            else:
                out = self.blocks[i - 1](part + outs[-1])
            outs.append(out)
        return torch.cat(outs, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.conv1 = _conv(channels, squeeze)
        self.conv2 = _conv(squeeze, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, squeeze: int, kernel: int, dilation: int):
        super().__init__()
        self.tdnn1 = TDNN(cin, cout, 1, 1)
        self.res2net_block = Res2Net(cout, scale, kernel, dilation)
        self.tdnn2 = TDNN(cout, cout, 1, 1)
        self.se_block = SqueezeExcitation(cout, squeeze)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


class AttentiveStatsPool(nn.Module):
    """Attention over time from [x, global mean, global std] -> [weighted mean, weighted std]."""

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TDNN(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels)

    @staticmethod
    def _stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (weights * x).sum(2)
        std = torch.sqrt((weights * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(1e-12))
        return mean, std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.shape[-1]
        uniform = torch.full((x.shape[0], 1, frames), 1.0 / frames, dtype=x.dtype, device=x.device)
        mean, std = self._stats(x, uniform)
        context = torch.cat(
            [x, mean[..., None].expand(-1, -1, frames), std[..., None].expand(-1, -1, frames)], 1
        )
        attention = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = self._stats(x, attention)
        return torch.cat([mean, std], dim=1)[..., None]


class SpeakerEncoder(nn.Module):
    """``speaker_encoder.*``: log-mel [B, frames, mel_dim] -> x-vectors [B, enc_dim]."""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        if not (len(cfg.enc_channels) == len(cfg.enc_kernel_sizes) == len(cfg.enc_dilations)):
            raise ValueError(
                "speaker_encoder_config: enc_channels, enc_kernel_sizes, enc_dilations "
                "differ in length"
            )
        self.cfg = cfg
        ch, ks, ds = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        blocks: list[nn.Module] = [TDNN(cfg.mel_dim, ch[0], ks[0], ds[0])]
        for i in range(1, len(ch) - 1):
            blocks.append(
                SERes2NetBlock(
                    ch[i - 1], ch[i], cfg.enc_res2net_scale, cfg.enc_se_channels, ks[i], ds[i]
                )
            )
        self.blocks = nn.ModuleList(blocks)
        self.mfa = TDNN(ch[-1], ch[-1], ks[-1], ds[-1])
        self.asp = AttentiveStatsPool(ch[-1], cfg.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, cfg.enc_dim)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        x = mels.transpose(1, 2)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(x)).squeeze(-1)

    @torch.inference_mode()
    def embed(self, wav: torch.Tensor, sr: int) -> torch.Tensor:
        """Mono waveform [N] (any rate; resampled to the encoder's) -> x-vector [enc_dim]."""
        from .audio import log_mel, to_rate

        param = next(self.parameters())
        wav = to_rate(wav, sr, self.cfg.sample_rate)
        mels = log_mel(wav[None].to(param.device), sr=self.cfg.sample_rate, n_mels=self.cfg.mel_dim)
        return self(mels.transpose(1, 2).to(param.dtype))[0]
