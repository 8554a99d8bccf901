"""Qwen3-TTS checkpoints: the tiny builder writes the official layout, omni loads it from a folder
or a Hub id (from the Hub cache, offline), and says clearly what is wrong with a bad one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from omni_qwen.tts import Qwen3TTSModel
from omni_qwen.tts.loading import CheckpointError


def test_tiny_checkpoint_has_the_official_layout(qwen3_tts_checkpoints: dict[str, Path]) -> None:
    folder = qwen3_tts_checkpoints["base"]
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert names == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "vocab.json",
        "merges.txt",
        "tokenizer_config.json",
        "speech_tokenizer/config.json",
        "speech_tokenizer/model.safetensors",
        "speech_tokenizer/preprocessor_config.json",
    }
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "qwen3_tts" and config["tts_model_type"] == "base"
    talker = config["talker_config"]
    for key in (
        "codec_eos_token_id",
        "codec_think_bos_id",
        "spk_id",
        "codec_language_id",
        "code_predictor_config",
    ):
        assert key in talker
    assert talker["rope_scaling"]["mrope_section"] and talker["num_code_groups"] == 16
    keys = set(load_file(str(folder / "model.safetensors")))
    for key in (
        "talker.model.layers.0.self_attn.q_norm.weight",
        "talker.model.codec_embedding.weight",
        "talker.model.text_embedding.weight",
        "talker.text_projection.linear_fc1.bias",
        "talker.codec_head.weight",
        "talker.code_predictor.model.codec_embedding.14.weight",
        "talker.code_predictor.lm_head.14.weight",
        "talker.code_predictor.small_to_mtp_projection.weight",
        "speaker_encoder.blocks.1.res2net_block.blocks.0.conv.weight",
        "speaker_encoder.asp.tdnn.conv.weight",
        "speaker_encoder.fc.weight",
    ):
        assert key in keys, key
    codec_keys = set(load_file(str(folder / "speech_tokenizer" / "model.safetensors")))
    for key in (
        "encoder.encoder.layers.0.conv.weight",
        "encoder.encoder_transformer.layers.0.self_attn.q_proj.weight",
        "encoder.downsample.conv.weight",
        "encoder.quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum",
        "decoder.quantizer.rvq_first.vq.layers.0._codebook.embedding_sum",
        "decoder.pre_transformer.layers.0.self_attn_layer_scale.scale",
        "decoder.upsample.0.1.pwconv1.weight",
        "decoder.decoder.1.block.2.act1.alpha",
    ):
        assert key in codec_keys, key
    speech = json.loads((folder / "speech_tokenizer" / "config.json").read_text())
    assert (
        speech["model_type"] == "qwen3_tts_tokenizer_12hz"
        and speech["encoder_config"]["model_type"] == "mimi"
    )
    assert "speaker_encoder.fc.weight" not in set(
        load_file(str(qwen3_tts_checkpoints["custom_voice"] / "model.safetensors"))
    )


def test_each_kind_loads_with_its_facts(qwen3_tts) -> None:
    cv, vd, base, small = (
        qwen3_tts[k] for k in ("custom_voice", "voice_design", "base", "custom_voice_0b6")
    )
    assert (cv.kind, vd.kind, base.kind) == ("custom_voice", "voice_design", "base")
    assert (
        cv.speakers == ["aiden", "serena", "uncle_fu"] and vd.speakers == [] and base.speakers == []
    )
    assert cv.languages == ["auto", "english", "chinese", "german"]  # dialects are not languages
    assert cv.supports_instructions and vd.supports_instructions
    assert not base.supports_instructions and not small.supports_instructions
    assert base.speaker_encoder is not None and cv.speaker_encoder is None
    assert (cv.num_code_groups, cv.sample_rate, cv.samples_per_frame) == (16, 24000, 1920)
    assert cv.generation_defaults["repetition_penalty"] == 1.05
    # the meta-device build got every buffer back: RoPE frequencies are real float32 tensors
    assert cv.talker.model.rotary_emb.inv_freq.dtype == torch.float32
    assert cv.talker.model.rotary_emb.inv_freq.device.type == "cpu"


def test_bfloat16_keeps_rope_frequencies_in_float32(qwen3_tts_checkpoints: dict[str, Path]) -> None:
    model = Qwen3TTSModel.from_pretrained(
        qwen3_tts_checkpoints["voice_design"], dtype=torch.bfloat16
    )
    assert model.dtype == torch.bfloat16
    assert model.talker.code_predictor.model.rotary_emb.inv_freq.dtype == torch.float32
    assert model.codec.decoder.pre_transformer.rotary_emb.inv_freq.dtype == torch.float32


def test_hub_id_loads_from_the_cache_offline(qwen3_tts_checkpoints, tmp_path, monkeypatch) -> None:
    """A Hub id goes through huggingface_hub: with HF_HUB_OFFLINE=1 it is served from the cache."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--Qwen--Qwen3-TTS-12Hz-0.6B-Base" / "snapshots" / ("a" * 40)
    shutil.copytree(qwen3_tts_checkpoints["base"], snapshot)
    (cache / "models--Qwen--Qwen3-TTS-12Hz-0.6B-Base" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-TTS-12Hz-0.6B-Base" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = Qwen3TTSModel.from_pretrained("Qwen/Qwen3-TTS-12Hz-0.6B-Base", cache_dir=str(cache))
    assert model.kind == "base"
    with pytest.raises(CheckpointError, match="Hugging Face Hub"):
        Qwen3TTSModel.from_pretrained("Qwen/Qwen3-TTS-12Hz-1.7B-Base", cache_dir=str(cache))


def test_bad_checkpoints_say_what_is_wrong(qwen3_tts_checkpoints, tmp_path) -> None:
    source = qwen3_tts_checkpoints["custom_voice"]
    broken = tmp_path / "broken"
    shutil.copytree(source, broken)
    state = load_file(str(broken / "model.safetensors"))
    state.pop("talker.codec_head.weight")
    state["talker.model.norm.weight"] = torch.ones(7)
    save_file(state, str(broken / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"missing \(e\.g\. codec_head\.weight\).*wrong shape"
    ):
        Qwen3TTSModel.from_pretrained(broken)

    pickles = tmp_path / "pickles"
    shutil.copytree(source, pickles)
    (pickles / "model.safetensors").rename(pickles / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="only safetensors"):
        Qwen3TTSModel.from_pretrained(pickles)

    (pickles / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json is missing"):
        Qwen3TTSModel.from_pretrained(pickles)

    other = tmp_path / "other"
    shutil.copytree(source, other)
    config = json.loads((other / "config.json").read_text())
    config["tts_model_type"] = "music"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="tts_model_type 'music'"):
        Qwen3TTSModel.from_pretrained(other)
    config["tts_model_type"] = "custom_voice"
    config["talker_config"]["use_sliding_window"] = True
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="use_sliding_window is not supported"):
        Qwen3TTSModel.from_pretrained(other)
    config["talker_config"]["use_sliding_window"] = False
    config["talker_config"]["num_code_groups"] = 8
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="makes 8 codebooks, the speech tokenizer decodes 16"):
        Qwen3TTSModel.from_pretrained(other)

    with pytest.raises(CheckpointError, match="not a folder"):
        Qwen3TTSModel.from_pretrained(tmp_path / "missing-folder")


def test_tiny_tokenizer_splits_the_chat_frame_as_the_real_one(qwen3_tts) -> None:
    """The official prompt slices the chat frame by position (3 tokens of role, 5 of tail)."""
    tokenizer = qwen3_tts["custom_voice"].tokenizer
    config = qwen3_tts["custom_voice"].config

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    role = ids("<|im_start|>assistant\n")
    assert len(role) == 3 and role[0] == config.im_start_token_id
    tail = ids("<|im_end|>\n<|im_start|>assistant\n")
    assert len(tail) == 5 and tail[0] == config.im_end_token_id and tail[2:] == role
    assert len(ids("<|im_end|>\n")) == 2 and len(ids("<|im_start|>user\n")) == 3
    text = "Grüße, 你好!"
    assert ids(f"<|im_start|>assistant\n{text}<|im_end|>\n")[3:-2] == ids(text)
    assert tokenizer.decode(ids(text)) == text
