"""Tiny random-weight speech checkpoints in the real transformers layout, for tests and demos.

``build_tiny_tts(path, family=...)`` saves a checkpoint with ``save_pretrained`` (safetensors,
``config.json`` with ``architectures``, a tokenizer/processor) that loads through the same code
as a Hub checkpoint. Builders are seeded and take well under a second or two each.

Families:

- ``"vits"``: ``VitsModel`` (MMS-TTS layout) + a character ``VitsTokenizer``; 16 kHz.
- ``"vits-multi"``: the same with ``num_speakers=3`` (voices ``speaker-0`` .. ``speaker-2``).
- ``"speecht5"``: ``SpeechT5ForTextToSpeech`` + its ``SpeechT5HifiGan`` vocoder in
  ``vocoder/`` (where the pipeline looks first) + a character tokenizer; 16 kHz.
- ``"fastspeech2"``: ``FastSpeech2ConformerModel`` + ``FastSpeech2ConformerHifiGan`` in
  ``vocoder/`` + a character tokenizer; 22.05 kHz.
- ``"fastspeech2-hifigan"``: the combined ``FastSpeech2ConformerWithHifiGan``.
- ``"csm"``: ``CsmForConditionalGeneration`` (autoregressive backbone + depth decoder over Mimi
  codec frames) + ``CsmProcessor``; 24 kHz; streams while it generates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FAMILIES = ("vits", "vits-multi", "speecht5", "fastspeech2", "fastspeech2-hifigan", "csm")

_CHARS = list("abcdefghijklmnopqrstuvwxyz ',.!?-")


def build_tiny_tts(path: str | Path, family: str = "vits", *, seed: int = 0) -> Path:
    """Build a tiny random-weight checkpoint of ``family`` at ``path`` and return the path."""
    import torch

    builders = {
        "vits": lambda p: _vits(p, speakers=1),
        "vits-multi": lambda p: _vits(p, speakers=3),
        "speecht5": _speecht5,
        "fastspeech2": lambda p: _fastspeech2(p, combined=False),
        "fastspeech2-hifigan": lambda p: _fastspeech2(p, combined=True),
        "csm": _csm,
    }
    if family not in builders:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        builders[family](out)
    finally:
        torch.random.set_rng_state(state)
    return out


def _char_tokenizer(
    path: Path, *, bos: str | None, eos: str | None, extra: list[str] | None = None, **kwargs: Any
) -> Any:
    """A character-level fast tokenizer (any text: unknown characters map to <unk>)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>"] + [t for t in (bos, eos) if t] + list(extra or [])
    vocab = {tok: i for i, tok in enumerate(specials + _CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    single = " ".join([t for t in (bos,) if t] + ["$A"] + [t for t in (eos,) if t])
    tok.post_processor = processors.TemplateProcessing(
        single=single,
        special_tokens=[(t, vocab[t]) for t in (bos, eos) if t],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token=bos,
        eos_token=eos,
        additional_special_tokens=list(extra or []) or None,
        model_input_names=["input_ids", "attention_mask"],
        **kwargs,
    )
    fast.save_pretrained(path)
    return fast


def _vits(path: Path, *, speakers: int) -> None:
    import torch
    from transformers import VitsConfig, VitsModel, VitsTokenizer

    chars = ["k"] + [c for c in _CHARS if c != "k"]  # MMS puts its pad character first
    vocab = {c: i for i, c in enumerate(chars)}
    (path / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = VitsTokenizer(
        vocab_file=str(path / "vocab.json"),
        pad_token="k",
        unk_token="<unk>",
        add_blank=True,
        phonemize=False,
        normalize=True,
    )
    tokenizer.save_pretrained(path)
    config = VitsConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        window_size=2,
        ffn_dim=16,
        flow_size=8,
        spectrogram_bins=9,
        upsample_initial_channel=16,
        # 256 samples per frame (MMS-TTS's hop): about a second of speech for a short sentence
        # at the couple of frames per character random durations give (16 made 0.07 s).
        upsample_rates=[8, 8, 4],
        upsample_kernel_sizes=[16, 16, 8],
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]],
        prior_encoder_num_flows=2,
        prior_encoder_num_wavenet_layers=1,
        posterior_encoder_num_wavenet_layers=1,
        duration_predictor_num_flows=1,
        duration_predictor_filter_channels=8,
        depth_separable_num_layers=1,
        num_speakers=speakers,
        speaker_embedding_size=8 if speakers > 1 else 0,
        sampling_rate=16000,
    )
    model = VitsModel(config).eval()
    with torch.no_grad():  # random weights saturate the vocoder's final tanh: a quiet last conv
        model.decoder.conv_post.weight.mul_(0.03)
    model.save_pretrained(path)


def _speecht5(path: Path) -> None:
    from transformers import (
        SpeechT5Config,
        SpeechT5ForTextToSpeech,
        SpeechT5HifiGan,
        SpeechT5HifiGanConfig,
    )

    tokenizer = _char_tokenizer(path, bos="<s>", eos="</s>")
    config = SpeechT5Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        num_mel_bins=8,
        speech_decoder_prenet_units=16,
        speech_decoder_prenet_layers=2,
        speech_decoder_postnet_layers=2,
        speech_decoder_postnet_units=16,
        speech_decoder_postnet_kernel=3,
        speaker_embedding_dim=16,
        reduction_factor=2,
        max_text_positions=600,
        max_speech_positions=600,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    model = SpeechT5ForTextToSpeech(config).eval()
    with __import__("torch").no_grad():
        # Make the stop-token head fire after a few dozen steps, as a trained model does, so
        # generation ends well before maxlenratio.
        model.speech_decoder_postnet.prob_out.bias.fill_(-4.0)
    model.save_pretrained(path)
    vocoder = SpeechT5HifiGan(
        SpeechT5HifiGanConfig(
            model_in_dim=8,
            upsample_initial_channel=16,
            upsample_rates=[4, 4],
            upsample_kernel_sizes=[8, 8],
            resblock_kernel_sizes=[3],
            resblock_dilation_sizes=[[1, 3]],
            sampling_rate=16000,
        )
    ).eval()
    vocoder.save_pretrained(path / "vocoder")


def _fastspeech2(path: Path, *, combined: bool) -> None:
    from transformers import (
        FastSpeech2ConformerConfig,
        FastSpeech2ConformerHifiGan,
        FastSpeech2ConformerHifiGanConfig,
        FastSpeech2ConformerModel,
        FastSpeech2ConformerWithHifiGan,
        FastSpeech2ConformerWithHifiGanConfig,
    )

    tokenizer = _char_tokenizer(path, bos=None, eos="<sos/eos>")
    config = FastSpeech2ConformerConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_mel_bins=8,
        encoder_num_attention_heads=2,
        encoder_layers=1,
        encoder_linear_units=16,
        decoder_layers=1,
        decoder_num_attention_heads=2,
        decoder_linear_units=16,
        speech_decoder_postnet_layers=2,
        speech_decoder_postnet_units=16,
        speech_decoder_postnet_kernel=3,
        positionwise_conv_kernel_size=1,
        encoder_kernel_size=3,
        decoder_kernel_size=3,
        duration_predictor_layers=1,
        duration_predictor_channels=16,
        duration_predictor_kernel_size=3,
        energy_predictor_layers=1,
        energy_predictor_channels=16,
        energy_predictor_kernel_size=3,
        pitch_predictor_layers=1,
        pitch_predictor_channels=16,
        pitch_predictor_kernel_size=3,
    )
    vocoder_config = FastSpeech2ConformerHifiGanConfig(
        model_in_dim=8,
        upsample_initial_channel=16,
        # 256 samples per frame (MMS-TTS's hop): about a second of speech for a short sentence
        # at the couple of frames per character random durations give (16 made 0.07 s).
        upsample_rates=[8, 8, 4],
        upsample_kernel_sizes=[16, 16, 8],
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]],
        sampling_rate=22050,
    )
    if combined:
        joint = FastSpeech2ConformerWithHifiGanConfig(
            model_config=config.to_dict(), vocoder_config=vocoder_config.to_dict()
        )
        model = FastSpeech2ConformerWithHifiGan(joint).eval()
        _nudge_durations(model.model)
        model.save_pretrained(path)
        return
    model = FastSpeech2ConformerModel(config).eval()
    _nudge_durations(model)
    model.save_pretrained(path)
    FastSpeech2ConformerHifiGan(vocoder_config).eval().save_pretrained(path / "vocoder")


def _nudge_durations(model: Any) -> None:
    """Random duration predictors round most tokens to 0 frames; a bias gives ~3 frames each."""
    import torch

    with torch.no_grad():
        model.duration_predictor.linear.bias.fill_(1.4)


def _csm(path: Path) -> None:
    from transformers import (
        CsmConfig,
        CsmForConditionalGeneration,
        CsmProcessor,
        EncodecFeatureExtractor,
        MimiConfig,
    )

    tokenizer = _char_tokenizer(
        path,
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        extra=["<|AUDIO|>", "<|audio_eos|>", "[", "]", "0", "1", "2", "3"],
    )
    ids = tokenizer.convert_tokens_to_ids
    codec = MimiConfig(
        hidden_size=16,
        num_filters=4,
        num_residual_layers=1,
        upsampling_ratios=[8, 6, 5],
        codebook_size=32,
        codebook_dim=16,
        num_quantizers=4,
        num_semantic_quantizers=1,
        vector_quantization_hidden_dimension=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=32,
        sliding_window=16,
        sampling_rate=24000,
        frame_rate=12.5,
        compress=2,
        upsample_groups=16,
    )
    config = CsmConfig(
        num_codebooks=4,
        vocab_size=32,  # = the codec codebook size, so every sampled code decodes
        text_vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        pad_token_id=ids("<|AUDIO|>"),
        audio_token_id=ids("<|AUDIO|>"),
        audio_eos_token_id=ids("<|audio_eos|>"),
        bos_token_id=ids("<|begin_of_text|>"),
        codebook_pad_token_id=31,
        codebook_eos_token_id=0,
        depth_decoder_config={
            "num_codebooks": 4,
            "backbone_hidden_size": 16,
            "vocab_size": 32,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 5,
        },
        codec_config=codec.to_dict(),
    )
    model = CsmForConditionalGeneration(config).eval()
    model.generation_config.max_new_tokens = 40
    model.generation_config.do_sample = True
    model.generation_config.depth_decoder_do_sample = True
    model.save_pretrained(path)
    processor = CsmProcessor(
        feature_extractor=EncodecFeatureExtractor(feature_size=1, sampling_rate=24000),
        tokenizer=tokenizer,
    )
    processor.save_pretrained(path)
