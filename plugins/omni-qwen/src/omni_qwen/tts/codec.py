"""The 12 Hz speech tokenizer's decoder: 16 codes per 80 ms frame -> 24 kHz waveform.

RVQ dequantization (1 semantic + 15 acoustic codebooks, each a Euclidean codebook stored as
``embedding_sum / cluster_usage``), a causal conv, a sliding-window transformer (Llama attention and
MLP from transformers, RMSNorm, layer scales), 2x2 transposed-conv upsampling with ConvNeXt blocks,
then a causal conv vocoder with SnakeBeta activations (x8 x5 x4 x3). Every convolution is causal,
so decoding new frames with enough already-decoded frames as left context gives the same samples
as decoding the whole sequence. Module names follow ``speech_tokenizer/model.safetensors``
(``decoder.*``).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .blocks import additive_mask
from .config import CodecDecoderConfig, codec_stack_config


class CausalConv(nn.Module):
    """Conv1d padded on the left by (effective kernel - stride), and on the right only to fill
    the last stride."""

    def __init__(
        self, cin: int, cout: int, kernel: int, dilation: int = 1, stride: int = 1, groups: int = 1
    ):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, dilation=dilation, groups=groups)
        self.stride = stride
        self.kernel = (kernel - 1) * dilation + 1
        self.left = self.kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = math.ceil((length - self.kernel + self.left) / self.stride + 1)
        right = (frames - 1) * self.stride + (self.kernel - self.left) - length
        return self.conv(F.pad(x, (self.left, right))).contiguous()


class CausalTransConv(nn.Module):
    """ConvTranspose1d with the (kernel - stride) trailing samples cut off."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1):
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride)
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return (x[..., : x.shape[-1] - self.trim] if self.trim > 0 else x).contiguous()


class SnakeBeta(nn.Module):
    """x + sin(x * e^alpha)^2 / e^beta, per channel (log-scale parameters)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = torch.exp(self.alpha)[None, :, None]
        beta = torch.exp(self.beta)[None, :, None]
        return x + (1.0 / (beta + 1e-9)) * torch.pow(torch.sin(x * alpha), 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dwconv(x).permute(0, 2, 1)
        h = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        return x + h.permute(0, 2, 1)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class UpsampleBlock(nn.Module):
    def __init__(self, cin: int, cout: int, rate: int):
        super().__init__()
        units: list[nn.Module] = [SnakeBeta(cin), CausalTransConv(cin, cout, 2 * rate, rate)]
        units += [ResidualUnit(cout, d) for d in (1, 3, 9)]
        self.block = nn.ModuleList(units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.block:
            x = unit(x)
        return x


class Codebook(nn.Module):
    def __init__(self, dim: int, size: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        table = self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]
        return F.embedding(codes, table)


class VQLayer(nn.Module):
    def __init__(self, dim: int, size: int):
        super().__init__()
        self._codebook = Codebook(dim, size)


class VQStack(nn.Module):
    def __init__(self, dim: int, size: int, count: int):
        super().__init__()
        self.layers = nn.ModuleList(VQLayer(dim, size) for _ in range(count))


class ResidualQuantizer(nn.Module):
    """codes [B, n, T] -> output_proj(sum of the n dequantized codebooks) [B, D, T]."""

    def __init__(self, dim: int, io_dim: int, size: int, count: int):
        super().__init__()
        self.input_proj = nn.Conv1d(
            io_dim, dim, 1, bias=False
        )  # used by encoders; kept for the keys
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = VQStack(dim, size, count)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        total = torch.zeros((), device=codes.device)
        for i, layer in enumerate(self.vq.layers):
            total = total + layer._codebook.decode(codes[:, i]).transpose(1, 2)
        return self.output_proj(total)


class SplitQuantizer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        dim = cfg.codebook_dim // 2
        self.rvq_first = ResidualQuantizer(dim, cfg.codebook_dim, cfg.codebook_size, 1)
        self.rvq_rest = ResidualQuantizer(
            dim, cfg.codebook_dim, cfg.codebook_size, cfg.num_quantizers - 1
        )

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        out = self.rvq_first.decode(codes[:, :1])
        if codes.shape[1] > 1:
            out = out + self.rvq_rest.decode(codes[:, 1:])
        return out


class CodecTransformerLayer(nn.Module):
    def __init__(self, config, index: int):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm
        from transformers.models.mimi.modeling_mimi import MimiLayerScale

        self.self_attn = LlamaAttention(config, index)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn_layer_scale = MimiLayerScale(config)
        self.mlp_layer_scale = MimiLayerScale(config)

    def forward(self, x, mask, position_embeddings):
        h, _ = self.self_attn(
            self.input_layernorm(x), position_embeddings=position_embeddings, attention_mask=mask
        )
        x = x + self.self_attn_layer_scale(h)
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class CodecTransformer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig, attn_implementation: str = "sdpa"):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

        self.config = codec_stack_config(cfg, attn_implementation)
        self.window = cfg.sliding_window
        self.layers = nn.ModuleList(
            CodecTransformerLayer(self.config, i) for i in range(cfg.num_hidden_layers)
        )
        self.norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(self.config)
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, latent] -> [B, T, latent], sliding-window causal attention over T."""
        x = self.input_proj(x)
        length = x.shape[1]
        q = torch.arange(length, device=x.device)[:, None]
        k = torch.arange(length, device=x.device)[None, :]
        mask = additive_mask(((k <= q) & (k > q - self.window))[None, None], x.dtype)
        positions = torch.arange(length, device=x.device)[None]
        position_embeddings = self.rotary_emb(x, positions)
        for layer in self.layers:
            x = layer(x, mask, position_embeddings)
        return self.output_proj(self.norm(x))


class CodecDecoder(nn.Module):
    """``decoder.*``: codes [B, Q, T] -> waveform [B, 1, T * total_upsample] in [-1, 1]."""

    def __init__(self, cfg: CodecDecoderConfig, attn_implementation: str = "sdpa"):
        super().__init__()
        self.cfg = cfg
        self.total_upsample = cfg.total_upsample
        self.quantizer = SplitQuantizer(cfg)
        self.pre_conv = CausalConv(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = CodecTransformer(cfg, attn_implementation)
        self.upsample = nn.ModuleList(
            nn.ModuleList(
                [
                    CausalTransConv(cfg.latent_dim, cfg.latent_dim, f, f),
                    ConvNeXtBlock(cfg.latent_dim),
                ]
            )
            for f in cfg.upsampling_ratios
        )
        layers: list[nn.Module] = [CausalConv(cfg.latent_dim, cfg.decoder_dim, 7)]
        for i, rate in enumerate(cfg.upsample_rates):
            layers.append(
                UpsampleBlock(cfg.decoder_dim // 2**i, cfg.decoder_dim // 2 ** (i + 1), rate)
            )
        out_dim = cfg.decoder_dim // 2 ** len(cfg.upsample_rates)
        layers += [SnakeBeta(out_dim), CausalConv(out_dim, 1, 7)]
        self.decoder = nn.ModuleList(layers)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        if codes.shape[1] != self.cfg.num_quantizers:
            raise ValueError(f"expected {self.cfg.num_quantizers} codebooks, got {codes.shape[1]}")
        h = self.pre_conv(self.quantizer.decode(codes)).transpose(1, 2)
        h = self.pre_transformer(h).permute(0, 2, 1)
        for blocks in self.upsample:
            for block in blocks:
                h = block(h)
        for layer in self.decoder:
            h = layer(h)
        return h.clamp(min=-1, max=1)

    def chunked(
        self, codes: torch.Tensor, chunk_size: int = 300, left_context: int = 25
    ) -> torch.Tensor:
        """The official whole-utterance decoding: chunks of ``chunk_size`` frames, each decoded with
        up to ``left_context`` frames before it, whose samples are then dropped."""
        pieces = []
        start = 0
        total = codes.shape[-1]
        while start < total:
            end = min(start + chunk_size, total)
            context = left_context if start - left_context > 0 else start
            wav = self(codes[..., start - context : end])
            pieces.append(wav[..., context * self.total_upsample :])
            start = end
        return torch.cat(pieces, dim=-1)
