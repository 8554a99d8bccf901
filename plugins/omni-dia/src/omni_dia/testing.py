"""Tiny random Dia checkpoints in the official layout, for tests and benchmarks.

:func:`build_tiny_dia` writes what ``nari-labs/Dia-1.6B-0626`` holds (``config.json`` with
``DiaForConditionalGeneration``, ``model.safetensors``, ``generation_config.json``, the processor's
files) plus the DAC codec in its own folder (``dac/``, named by ``processor_config.json`` as the
Hub's names ``descript/dac_44khz``), at a tiny size from transformers' own classes with seeded
random weights, offline. :func:`reference_generate` is transformers' ``generate()`` and the
processor's decode on it: what the pipeline must equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni_dia.layout import DAC_FOLDER, load_processor


def tiny_dac_config(hop: tuple[int, ...] = (2, 4)) -> Any:
    """DAC at a tiny size: Dia's 9 codebooks of 1024 codes (the decoder's vocabulary needs
    them), ``hop`` the downsampling whose product is the samples of a frame."""
    from transformers import DacConfig

    samples = 1
    for ratio in hop:
        samples *= ratio
    return DacConfig(
        encoder_hidden_size=4,
        downsampling_ratios=list(hop),
        decoder_hidden_size=16,
        n_codebooks=9,
        codebook_size=1024,
        codebook_dim=4,
        hop_length=samples,
        sampling_rate=44100,
    )


def tiny_config() -> Any:
    """Dia's config at a tiny size (the official architecture, every part smaller)."""
    from transformers import DiaConfig

    return DiaConfig(
        encoder_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 8,
        },
        decoder_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "cross_num_attention_heads": 4,
            "cross_head_dim": 8,
            "cross_num_key_value_heads": 4,
            "cross_hidden_size": 32,
        },
        architectures=["DiaForConditionalGeneration"],
    )


def generation_config(*, max_length: int = 3072) -> Any:
    """The official checkpoint's generation config (sampling, guidance 3, top-k 45)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=True,
        guidance_scale=3.0,
        temperature=1.8,
        top_p=0.95,
        top_k=45,
        max_length=max_length,
        bos_token_id=1026,
        eos_token_id=1024,
        pad_token_id=1025,
        decoder_start_token_id=1026,
    )


def save_processor(path: Path, dac: Any) -> None:
    """The processor's files as the Hub has them, the codec saved in ``dac/`` and named there."""
    from transformers import DiaFeatureExtractor, DiaProcessor, DiaTokenizer

    dac.save_pretrained(path / DAC_FOLDER)
    extractor = DiaFeatureExtractor(
        sampling_rate=dac.config.sampling_rate, hop_length=dac.config.hop_length
    )
    DiaProcessor(extractor, DiaTokenizer(), dac).save_pretrained(path)
    config = path / "processor_config.json"
    data = json.loads(config.read_text())
    data["audio_tokenizer"]["audio_tokenizer_name_or_path"] = DAC_FOLDER
    config.write_text(json.dumps(data, indent=2) + "\n")


def build_tiny_dia(
    path: Path | str,
    *,
    seed: int = 0,
    hop: tuple[int, ...] = (2, 4),
    scale: float = 0.2,
    eos_scale: float = 3.0,
    max_length: int = 3072,
) -> Path:
    """Write a tiny random Dia checkpoint in the official layout to ``path`` (``hop``: DAC's
    downsampling, samples per frame; ``eos_scale``: channel 0's end logit scaled so random
    weights end a clip on their own after some dozen positions, as a trained model does)."""
    import torch
    from transformers import DacModel, DiaForConditionalGeneration

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    dac = DacModel(tiny_dac_config(hop)).eval()
    model = DiaForConditionalGeneration(tiny_config()).eval()
    with torch.no_grad():  # random weights at a scale where the head's choices vary
        for name, param in model.named_parameters():
            if "norm" not in name and param.dim() > 1:
                param.normal_(0.0, scale)
        model.logits_dense.weight[model.config.decoder_config.eos_token_id] *= eos_scale
    model.generation_config = generation_config(max_length=max_length)
    model.save_pretrained(path)
    save_processor(path, dac)
    return path


def reference_generate(
    path: Path | str,
    text: str,
    *,
    audio: Any = None,
    max_new_tokens: int | None = None,
    **generate: Any,
) -> tuple[Any, Any]:
    """transformers' ``generate()`` (greedy unless ``generate`` says otherwise) and the
    processor's decode: ``(frames [channels, n] the waveform's codes, waveform)``; ``audio``
    a voice prompt (mono at the processor's rate; its transcript opens ``text``)."""
    from transformers import DiaForConditionalGeneration

    model = DiaForConditionalGeneration.from_pretrained(path).eval()
    processor = load_processor(path)
    inputs = processor(text=[text], audio=None if audio is None else [audio], return_tensors="pt")
    limit = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    out = model.generate(**inputs, **{"do_sample": False, **limit, **generate})
    prompt = None
    if audio is not None:
        prompt = processor.get_audio_prompt_len(inputs["decoder_attention_mask"])
    waveform = processor.batch_decode(out, audio_prompt_len=prompt)[0]
    return undelayed(processor, out, prompt)[0], waveform


def undelayed(processor: Any, sequences: Any, prompt: int | None = None) -> list[Any]:
    """The frames ``batch_decode`` hands DAC (``[channels, n]`` per row): the delay pattern
    reverted by the processor's own indices, from after the prompt to the end token."""
    kwargs = processor.audio_kwargs  # the processor's defaults: Dia's tokens and delays
    pad, bos, delays = kwargs["pad_token_id"], kwargs["bos_token_id"], kwargs["delay_pattern"]
    rows, length, channels = sequences.shape
    indices = processor.build_indices(rows, length, channels, delays, revert=True)
    frames = processor.apply_audio_delay(sequences, -1, -1, indices).transpose(1, 2)
    out = []
    for row in range(rows):
        start = prompt if prompt is not None else int((sequences[row, :, 0] == bos).sum())
        end = length - int((sequences[row, :, 0] == pad).sum()) - 1
        out.append(frames[row, :, start:end])
    return out
