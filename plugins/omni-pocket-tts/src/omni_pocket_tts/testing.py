"""Tiny random Pocket TTS checkpoints in the official layout, for tests and benchmarks.

:func:`build_tiny_pocket_tts` writes what a transformers Pocket TTS checkpoint holds
(``config.json`` with ``PocketTTSForConditionalGeneration``, ``model.safetensors``,
``generation_config.json``, the processor's files: tokenizer, chat template, feature extractor)
plus the codec in its own folder (``audio_tokenizer/``, which ``processor_config.json`` names)
and one built-in voice (``voices/alba.safetensors``), at a tiny size from transformers' own
classes with seeded random weights, offline. :func:`reference_generate` is transformers'
``generate()`` and the processor's ``decode`` on it: what the pipeline must equal.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from omni_pocket_tts.layout import CODEC_FOLDER, VOICES_FOLDER, load_processor

#: The tokenizer's placeholders, in the order of the config's ids (prompt, latent, prompt BOS,
#: audio BOS), and the attributes the processor reads them by.
PLACEHOLDERS = {
    "audio_prompt_token": "<audio_prompt>",
    "audio_latent_token": "<audio_latent>",
    "audio_prompt_bos_token": "<audio_prompt_bos>",
    "audio_bos_token": "<audio_bos>",
}
#: The prompt layout the processor documents: the voice BOS and its placeholder, the text, the
#: first audio position.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'audio' -%}<audio_prompt_bos><audio_prompt>{%- endif -%}"
    "{%- endfor -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endfor -%}<audio_bos>"
)
_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;\u2581"


def tiny_tokenizer() -> Any:
    """A character-level tokenizer (SentencePiece-style spaces) with Pocket TTS's placeholders."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "<pad>", *_CHARS])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens=dict(PLACEHOLDERS),
    )


def tiny_codec_config() -> Any:
    """The codec at a tiny size: the released 32-d latents of 1920 samples (12.5 frames a
    second at 24 kHz), narrow convolutions, a one-layer decoder transformer with a sliding
    window of 8 positions (a frame is 8 of them)."""
    from transformers import PocketTTSAudioTokenizerConfig

    return PocketTTSAudioTokenizerConfig(
        hidden_size=16,
        num_filters=4,
        upsampling_ratios=[8, 6, 5],
        num_hidden_layers=1,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=8,
        latent_stride=8,
        upsample_groups=16,
        latent_dim=32,
    )


def tiny_config(tokenizer: Any, frame_rate: float) -> Any:
    """Pocket TTS's config at a tiny size, its placeholder ids the tokenizer's."""
    from transformers import PocketTTSConfig

    ids = tokenizer.convert_tokens_to_ids(list(PLACEHOLDERS.values()))
    return PocketTTSConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=2048,
        audio_prompt_token_id=ids[0],
        audio_latent_token_id=ids[1],
        audio_prompt_bos_token_id=ids[2],
        audio_bos_token_id=ids[3],
        frame_rate=frame_rate,
        flow_head_config={
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "condition_dim": 32,
            "latent_dim": 32,
            "frequency_embedding_size": 16,
        },
        architectures=["PocketTTSForConditionalGeneration"],
    )


def generation_config(*, eos_threshold: float = -4.0) -> Any:
    """The released checkpoints' generation settings (sampling at temperature 0.7, one flow
    step, the end-of-speech threshold), as a dict-returning generation config."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=True, temperature=0.7, pad_token_id=3)
    config.return_dict_in_generate = True
    config.num_flow_steps = 1
    config.eos_threshold = eos_threshold
    config.min_frames_before_eos = 6
    return config


def save_processor(path: Path, codec: Any, tokenizer: Any) -> None:
    """The processor's files as a checkpoint has them, the codec saved in ``audio_tokenizer/``
    and named there."""
    from transformers import PocketTTSFeatureExtractor, PocketTTSProcessor

    codec.save_pretrained(path / CODEC_FOLDER)
    config = codec.config
    extractor = PocketTTSFeatureExtractor(
        sampling_rate=config.sampling_rate,
        frame_size=config.frame_size,
        pad_to_multiple_of=config.frame_size,
    )
    processor = PocketTTSProcessor(extractor, tokenizer, codec, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(path)
    file = path / "processor_config.json"
    data = json.loads(file.read_text())
    data["audio_tokenizer"]["audio_tokenizer_name_or_path"] = CODEC_FOLDER
    file.write_text(json.dumps(data, indent=2) + "\n")


def save_voice(path: Path, name: str, latents: Any) -> Path:
    """A built-in voice: ``voices/<name>.safetensors`` holding its ``[frames, latent_dim]``."""
    from safetensors.torch import save_file

    folder = path / VOICES_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"{name}.safetensors"
    save_file({"audio_prompt_latents": latents.float().contiguous()}, str(file))
    return file


def build_tiny_pocket_tts(
    path: Path | str,
    *,
    seed: int = 0,
    scale: float = 0.2,
    eos_threshold: float = 1.0,
) -> Path:
    """Write a tiny random Pocket TTS checkpoint in the official layout to ``path``, with one
    built-in voice ``alba`` (``eos_threshold``: the generation config's; with the end-of-speech
    head's random weights, clips end on their own after some dozen frames, as trained ones do;
    a high one never ends a clip)."""
    import torch
    from transformers import PocketTTSAudioTokenizerModel, PocketTTSForConditionalGeneration

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    codec = PocketTTSAudioTokenizerModel(tiny_codec_config()).eval()
    model = PocketTTSForConditionalGeneration(tiny_config(tokenizer, codec.config.frame_rate))
    model.eval()
    with torch.no_grad():  # random weights at a scale where the heads' outputs vary
        for name, param in model.named_parameters():
            if "norm" not in name and param.dim() > 1:
                param.normal_(0.0, scale)
        model.model.bos_latent.normal_()
        model.latent_mean.normal_(0.0, 0.1)
        model.latent_std.uniform_(0.5, 1.5)
        for param in codec.decoder.decoder_seanet.layers[-1].parameters():
            param.mul_(0.05)  # audio within [-1, 1], as 16-bit PCM holds it
    model.generation_config = generation_config(eos_threshold=eos_threshold)
    model.save_pretrained(path)
    save_processor(path, codec, tokenizer)
    with torch.no_grad():  # the voice: the codec's latents of 6 frames of noise
        audio = torch.randn(1, 1, 6 * codec.config.frame_size) * 0.1
        save_voice(path, "alba", codec.encode(audio).latents[0])
    return path


def reference_generate(
    path: Path | str,
    text: str,
    *,
    audio: Any = None,
    voice: Any = None,
    seed: int | None = None,
    **generate: Any,
) -> tuple[Any, Any]:
    """transformers' ``generate()`` (greedy unless ``seed``: then sampled after
    ``torch.manual_seed(seed)``) and the processor's ``decode``: ``(latents [frames,
    latent_dim], waveform)``; ``audio`` a voice prompt (mono at the processor's rate) or
    ``voice`` its latents (a built-in voice)."""
    import torch

    model, processor = _reference(str(path))
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if audio is not None or voice is not None:
        content.insert(0, {"type": "audio", "audio": audio})
    rendered = processor.apply_chat_template([{"role": "user", "content": content}])
    kwargs: dict[str, Any] = {"text": [rendered], "return_tensors": "pt"}
    if audio is not None:
        kwargs["audio"] = [audio]
    elif voice is not None:
        kwargs["audio_prompt_latents"] = [voice]
    inputs = processor(**kwargs)
    options = {"do_sample": seed is not None, **generate}
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        out = model.generate(**{**inputs, **options})
    frames = int(out.audio_latents_mask[0].sum())
    waveform = processor.decode(out.audio_latents, out.audio_latents_mask)[0]
    return out.audio_latents[0, :frames], waveform


@functools.lru_cache(maxsize=4)
def _reference(path: str) -> tuple[Any, Any]:
    """transformers' model and processor of a checkpoint folder (loaded once a folder)."""
    from transformers import PocketTTSForConditionalGeneration

    return PocketTTSForConditionalGeneration.from_pretrained(path).eval(), load_processor(path)
