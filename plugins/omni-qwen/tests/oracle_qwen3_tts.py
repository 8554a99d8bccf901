"""Fidelity oracle: the official qwen-tts 0.1.1 against omni's Qwen3-TTS on tiny checkpoints.

Runs only in ``tox -e oracle-qwen-tts`` (the file name keeps it out of the default suite): this
process has qwen-tts with its pinned transformers 4.57.3; omni's half runs in a subprocess with
transformers 5 (``OMNI_ORACLE_SITE``) and writes its results next to the tiny checkpoints it builds
in the official layout. Same inputs, greedy decoding (``do_sample=False``,
``subtalker_dosample=False``,
repetition penalty 1.05 as in generation_config.json) for CustomVoice, VoiceDesign and Base (ICL
and x-vector-only) prompts. Asserted: the official loader finds every weight and no extra ones;
codes are equal; waveforms agree within ``WAV_ATOL``; the clone prompt's reference codes are
equal and the x-vector agrees within ``SPK_RTOL``; the mel filterbank equals librosa's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

WAV_ATOL = 1e-5  # float32 CPU on both sides; the observed difference is 0 (bit-identical)
SPK_RTOL = 1e-4
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def omni(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray], dict]:
    out = tmp_path_factory.mktemp("oracle")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([env["OMNI_ORACLE_SITE"], env["OMNI_ORACLE_SRC"]])
    subprocess.run(
        [sys.executable, str(HERE / "oracle_qwen3_tts_omni_side.py"), str(out)], check=True, env=env
    )
    meta = json.loads((out / "cases.json").read_text())
    return out, dict(np.load(out / "omni.npz")), meta


@pytest.fixture(scope="module")
def official(omni):
    from qwen_tts import Qwen3TTSModel

    out = omni[0]
    torch.set_num_threads(1)
    return {
        k: Qwen3TTSModel.from_pretrained(str(out / k), dtype=torch.float32)
        for k in ("custom_voice", "voice_design", "base")
    }


def _ids(tts, text: str) -> torch.Tensor:
    return tts.processor(text=text, return_tensors="pt")["input_ids"]


def test_the_official_modules_take_every_weight(omni):
    """The saved tensors are exactly the official modules' state (names and shapes), nothing missing
    and nothing extra, for the model and its speech tokenizer."""
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )
    from safetensors.torch import load_file

    out = omni[0]
    for kind in ("custom_voice", "voice_design", "base"):
        pairs = (
            (Qwen3TTSForConditionalGeneration, Qwen3TTSConfig, out / kind),
            (Qwen3TTSTokenizerV2Model, Qwen3TTSTokenizerV2Config, out / kind / "speech_tokenizer"),
        )
        for model_cls, config_cls, folder in pairs:
            module = model_cls(config_cls.from_pretrained(str(folder)))
            expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
            saved = {
                k: tuple(v.shape) for k, v in load_file(str(folder / "model.safetensors")).items()
            }
            assert saved == expected, (kind, folder.name, sorted(set(saved) ^ set(expected))[:5])


def _generate(tts, kind: str, request: dict, non_streaming: bool, meta: dict, prompt_items):
    """Codes from the official model's generate and the waveform from its public wrapper."""
    gen = dict(
        do_sample=False,
        subtalker_dosample=False,
        max_new_tokens=meta["max_new_tokens"],
        repetition_penalty=meta["penalty"],
    )
    text, language = request["text"], request.get("language", "auto")
    input_ids = [_ids(tts, f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")]
    instructions = request.get("instructions")
    instruct_ids = [
        _ids(tts, f"<|im_start|>user\n{instructions}<|im_end|>\n") if instructions else None
    ]
    if kind == "base":
        item = prompt_items[0]
        clone = dict(
            ref_code=[item.ref_code],
            ref_spk_embedding=[item.ref_spk_embedding],
            x_vector_only_mode=[item.x_vector_only_mode],
            icl_mode=[item.icl_mode],
        )
        ref_ids = [
            _ids(tts, f"<|im_start|>assistant\n{item.ref_text}<|im_end|>\n")
            if item.icl_mode
            else None
        ]
        codes, _ = tts.model.generate(
            input_ids=input_ids,
            ref_ids=ref_ids,
            voice_clone_prompt=clone,
            languages=[language],
            non_streaming_mode=non_streaming,
            **gen,
        )
        wavs, sr = tts.generate_voice_clone(
            text=text,
            language=language,
            voice_clone_prompt=prompt_items,
            non_streaming_mode=non_streaming,
            **gen,
        )
    else:
        speaker = request.get("speaker")
        codes, _ = tts.model.generate(
            input_ids=input_ids,
            instruct_ids=instruct_ids,
            languages=[language],
            speakers=[speaker] if speaker else None,
            non_streaming_mode=non_streaming,
            **gen,
        )
        if kind == "custom_voice":
            wavs, sr = tts.generate_custom_voice(
                text=text,
                speaker=speaker,
                language=language,
                instruct=instructions,
                non_streaming_mode=non_streaming,
                **gen,
            )
        else:
            wavs, sr = tts.generate_voice_design(
                text=text,
                instruct=instructions,
                language=language,
                non_streaming_mode=non_streaming,
                **gen,
            )
    assert sr == 24000
    return codes[0].transpose(0, 1).numpy(), wavs[0]


def test_codes_equal_and_waveforms_match(omni, official):
    _, results, meta = omni
    ref = results["ref_audio"]
    for name, kind, request, non_streaming in meta["cases"]:
        tts = official[kind]
        items = None
        if kind == "base":
            items = tts.create_voice_clone_prompt(
                ref_audio=(ref, 24000),
                ref_text=request.get("ref_text"),
                x_vector_only_mode=request.get("x_vector_only", False),
            )
            np.testing.assert_allclose(
                items[0].ref_spk_embedding.numpy(),
                results[f"{name}.spk"],
                rtol=SPK_RTOL,
                atol=1e-6,
                err_msg=name,
            )
            if items[0].ref_code is not None:
                np.testing.assert_array_equal(
                    items[0].ref_code.transpose(0, 1).numpy(),
                    results[f"{name}.ref_codes"],
                    err_msg=name,
                )
        codes, wav = _generate(tts, kind, request, non_streaming, meta, items)
        ours = results[f"{name}.codes"]
        assert codes.shape == ours.shape, (name, codes.shape, ours.shape)
        np.testing.assert_array_equal(codes, ours, err_msg=name)
        assert wav.shape == results[f"{name}.wav"].shape, name
        np.testing.assert_allclose(wav, results[f"{name}.wav"], rtol=0, atol=WAV_ATOL, err_msg=name)
        diff = float(np.abs(wav - results[f"{name}.wav"]).max())
        print(f"{name}: {ours.shape[1]} frames equal, max |wav diff| {diff:.2e}")


def test_codec_decode_matches(omni, official):
    _, results, _ = omni
    codes = torch.from_numpy(results["fixed_codes"]).transpose(0, 1)  # [T, 16]
    wavs, _ = official["custom_voice"].model.speech_tokenizer.decode([{"audio_codes": codes}])
    assert wavs[0].shape == results["fixed_wav"].shape
    np.testing.assert_allclose(wavs[0], results["fixed_wav"], rtol=0, atol=WAV_ATOL)


def test_mel_filterbank_is_librosas(omni):
    import librosa

    sys.path.insert(0, os.environ["OMNI_ORACLE_SRC"])
    from omni_qwen.tts.audio import mel_filterbank

    for sr, n_fft, n_mels, fmax in ((24000, 1024, 128, 12000), (16000, 400, 80, None)):
        expected = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=0, fmax=fmax)
        np.testing.assert_allclose(
            mel_filterbank(sr, n_fft, n_mels, 0.0, fmax), expected, rtol=1e-5, atol=1e-8
        )
