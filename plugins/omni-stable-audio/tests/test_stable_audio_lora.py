"""Stable Audio with LoRA adapters per request and fused at load, against diffusers'
``StableAudioPipeline`` with the same adapter put on its (plain) DiT by peft itself
(``inject_adapter_in_model`` + ``set_peft_model_state_dict``), on the tiny checkpoint.

Two random adapters, built with peft on the diffusers DiT: ``style`` (rank 4 on every attention
projection, ``transformer.``-prefixed keys, no metadata: alpha = rank) and ``bold`` (rank 2 on
the self-attention's Q and V, unprefixed keys, ``lora_alpha`` 4 in the file's
``lora_adapter_metadata`` header: a scale of 2 per module that only the metadata gives).
Also: the DiT class omni loads against diffusers' plain one, the file diffusers'
``save_lora_adapter`` writes, bad files, ``omni generate audio --lora`` and the server."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_core import ConfigError, Omni

SMALL: dict[str, Any] = {"num_inference_steps": 3, "duration_s": 0.2}
THEIRS: dict[str, Any] = {"num_inference_steps": 3, "audio_end_in_s": 0.2}
PROMPT = "a dog barking in the rain"
TOLERANCE = 1e-4
#: name -> (LoraConfig kwargs, key prefix in the file, metadata written to the header)
ADAPTERS: dict[str, tuple[dict[str, Any], str, bool]] = {
    "style": ({"r": 4, "lora_alpha": 4, "target_modules": ["to_q", "to_k", "to_v", "to_out.0"]},
              "transformer.", False),
    "bold": ({"r": 2, "lora_alpha": 4, "target_modules": ["attn1.to_q", "attn1.to_v"]}, "", True),
}  # fmt: skip


def _peft_config(kwargs: dict[str, Any]) -> Any:
    from peft import LoraConfig

    return LoraConfig(**kwargs)


@pytest.fixture(scope="module")
def lora_files(audio_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """name -> (file, the PEFT state dict it holds): random weights (std 0.3) of a peft LoRA
    injected into diffusers' plain StableAudioDiTModel."""
    import torch
    from diffusers import StableAudioDiTModel
    from peft import inject_adapter_in_model
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("stable-audio-lora")
    out = {}
    for seed, (name, (kwargs, prefix, header)) in enumerate(ADAPTERS.items()):
        model = StableAudioDiTModel.from_pretrained(audio_checkpoint / "transformer")
        inject_adapter_in_model(_peft_config(kwargs), model, adapter_name=name)
        shapes = get_peft_model_state_dict(model, adapter_name=name)
        generator = torch.Generator("cpu").manual_seed(seed)
        weights = {k: torch.randn(v.shape, generator=generator) * 0.3 for k, v in shapes.items()}
        path = folder / f"{name}.safetensors"
        meta = {"lora_adapter_metadata": json.dumps(kwargs)} if header else None
        save_file({prefix + k: v for k, v in weights.items()}, str(path), metadata=meta)
        out[name] = (path, weights)
    return out


@pytest.fixture(scope="module")
def with_lora(audio_checkpoint: Path, lora_files: dict) -> Omni:
    adapters = {name: str(path) for name, (path, _) in lora_files.items()}
    return Omni(audio_checkpoint, device="cpu", dtype="float32", lora=adapters)


@pytest.fixture(scope="module")
def reference(audio_checkpoint: Path, lora_files: dict, reference_audio: Any) -> Any:
    """``reference(name, scale, seed)``: diffusers' clip with adapter ``name`` at ``scale``
    (one pipeline per adapter, peft's own layers on diffusers' plain DiT)."""
    import diffusers
    from peft import inject_adapter_in_model, set_peft_model_state_dict
    from peft.tuners.lora import LoraLayer

    pipes: dict[str, Any] = {}

    def run(name: str, scale: float, seed: int) -> np.ndarray:
        if name not in pipes:
            pipe = diffusers.StableAudioPipeline.from_pretrained(audio_checkpoint)
            pipe.set_progress_bar_config(disable=True)
            assert type(pipe.transformer) is diffusers.StableAudioDiTModel
            inject_adapter_in_model(_peft_config(ADAPTERS[name][0]), pipe.transformer, name)
            set_peft_model_state_dict(pipe.transformer, lora_files[name][1], adapter_name=name)
            pipes[name] = pipe
        pipe = pipes[name]
        for module in pipe.transformer.modules():
            if isinstance(module, LoraLayer):
                module.set_scale(name, scale)
        return reference_audio(pipe, seed, prompt=PROMPT, **THEIRS)

    return run


def _worst(ours: np.ndarray, reference: np.ndarray) -> float:
    assert ours.shape == reference.shape
    assert reference.std() > 0.05, "near-silent audio: the comparison would prove nothing"
    return float(np.abs(ours - reference).max())


def test_the_lora_class_loads_and_runs_as_diffusers_plain_dit(audio_checkpoint: Path) -> None:
    """The DiT omni loads (diffusers' PEFT mixin added) is diffusers' plain class otherwise:
    silent load, the same weights and config, a bit-identical forward."""
    import torch
    from diffusers import StableAudioDiTModel
    from omni_stable_audio.lora import StableAudioLoraDiT

    folder = audio_checkpoint / "transformer"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = StableAudioLoraDiT.from_pretrained(folder, use_safetensors=True).eval()
    plain = StableAudioDiTModel.from_pretrained(folder, use_safetensors=True).eval()
    drop = {"_class_name"}  # diffusers records the loading class' own name
    assert {k: v for k, v in ours.config.items() if k not in drop} == {
        k: v for k, v in plain.config.items() if k not in drop
    }
    mine, theirs = ours.state_dict(), plain.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    generator = torch.Generator("cpu").manual_seed(0)
    inputs = {
        "hidden_states": torch.randn(2, 8, 16, generator=generator),
        "timestep": torch.tensor([10.0, 500.0]),
        "encoder_hidden_states": torch.randn(2, 5, 16, generator=generator),
        "global_hidden_states": torch.randn(2, 1, 32, generator=generator),
        "return_dict": False,
    }
    with torch.no_grad():
        assert torch.equal(ours(**inputs)[0], plain(**inputs)[0])
    from omni_core.testing import assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-stable-audio")  # acceleration finds its facts
    assert registry.denoiser_for("StableAudioLoraDiT") is not None


@pytest.mark.parametrize(("name", "scale"), [("style", 0.8), ("bold", None)])
def test_a_lora_per_request_matches_diffusers_with_peft(
    name, scale, with_lora, audio_model, reference
) -> None:
    from omni_stable_audio.lora import StableAudioLoraDiT

    assert isinstance(with_lora.pipeline.transformer, StableAudioLoraDiT)
    ours = with_lora.generate(PROMPT, seed=3, **SMALL, lora=[{"name": name, "scale": scale}])
    assert _worst(ours.audio, reference(name, 1.0 if scale is None else scale, 3)) <= TOLERANCE
    plain = audio_model.generate(PROMPT, seed=3, **SMALL).audio
    assert np.abs(ours.audio - plain).max() > 0.05  # the adapter changes the clip


def test_a_request_without_adapters_is_the_base_model(with_lora, audio_model) -> None:
    with_lora.generate(PROMPT, seed=4, **SMALL, lora=[{"name": "style"}])  # leave one active
    base = with_lora.generate(PROMPT, seed=4, **SMALL)
    assert np.array_equal(base.audio, audio_model.generate(PROMPT, seed=4, **SMALL).audio)


def test_adapters_and_scales_alternate(with_lora, audio_model, reference) -> None:
    """Request after request the adapter set switches (and back), and a batch of requests with
    different adapters gives each what it gets alone (never one step for two sets)."""
    asks: list[list[dict[str, Any]]] = [
        [{"name": "style", "scale": 0.8}],
        [{"name": "bold"}],
        [],
        [{"name": "style", "scale": 0.3}],
        [{"name": "style", "scale": 0.8}],
    ]
    alone = [with_lora.generate(PROMPT, seed=3, **SMALL, lora=a).audio for a in asks]
    assert np.array_equal(alone[0], alone[4])
    assert _worst(alone[1], reference("bold", 1.0, 3)) <= TOLERANCE
    assert np.array_equal(alone[2], audio_model.generate(PROMPT, seed=3, **SMALL).audio)
    assert _worst(alone[3], reference("style", 0.3, 3)) <= TOLERANCE
    assert np.abs(alone[3] - alone[0]).max() > 0.05  # the scale matters

    pipeline, groups = with_lora.pipeline, []
    step = pipeline.step

    def recorded(states: list[Any]) -> None:
        groups.append({s.request.lora_key() for s in states})
        step(states)

    pipeline.step = recorded  # type: ignore[method-assign]
    try:
        together = with_lora.run([with_lora.request(PROMPT, seed=3, **SMALL, lora=a) for a in asks])
    finally:
        del pipeline.step
    assert all(len(keys) == 1 for keys in groups)
    assert len(groups) == 4 * SMALL["num_inference_steps"]  # four adapter sets, one step each
    for got, want in zip(together, alone, strict=True):
        assert _worst(got.audio, want) <= TOLERANCE


def test_a_fused_adapter_is_the_per_request_one(audio_checkpoint, lora_files, with_lora) -> None:
    from peft.tuners.tuners_utils import BaseTunerLayer

    path = str(lora_files["style"][0])
    fused = Omni(
        audio_checkpoint, device="cpu", dtype="float32", lora={"style": path}, fuse_lora="style"
    )
    modules = fused.pipeline.transformer.modules()
    assert not any(isinstance(m, BaseTunerLayer) for m in modules)  # merged, PEFT layers gone
    # Without CFG: merged weights (W + BA) round differently from W x + B A x, and CFG 7's
    # 13x amplification of the difference takes it to ~2.6e-4 on this tiny DiT (1e-5 here)
    no_cfg = {**SMALL, "guidance_scale": 1.0}
    ours = fused.generate(PROMPT, seed=5, **no_cfg)
    per_request = with_lora.generate(PROMPT, seed=5, **no_cfg, lora=[{"name": "style"}])
    assert _worst(ours.audio, per_request.audio) <= TOLERANCE


def test_the_file_diffusers_save_lora_adapter_writes_is_read(
    audio_checkpoint: Path, with_lora, tmp_path: Path
) -> None:
    """A LoRA trained on the DiT through the mixin and saved by diffusers (bare keys, the
    LoraConfig in the header) reads as it is, also by a reader of a DiT with adapters in it."""
    import torch
    from omni_stable_audio.lora import StableAudioLoraDiT, lora_reader
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    model = StableAudioLoraDiT.from_pretrained(audio_checkpoint / "transformer")
    config = LoraConfig(r=2, lora_alpha=6, target_modules=["to_k"], init_lora_weights=False)
    model.add_adapter(config, adapter_name="trained")
    model.save_lora_adapter(str(tmp_path), adapter_name="trained")
    saved = get_peft_model_state_dict(model, adapter_name="trained")
    read = lora_reader(with_lora.pipeline.transformer)  # PEFT layers wrap its projections
    state_dict, metadata = read(tmp_path / "pytorch_lora_weights.safetensors")
    assert state_dict.keys() == {f"transformer.{k}" for k in saved}
    assert all(torch.equal(state_dict[f"transformer.{k}"], v) for k, v in saved.items())
    assert metadata["r"] == 2 and metadata["lora_alpha"] == 6


@pytest.mark.parametrize(
    "keys",
    [
        {"transformer.nope.lora_A.weight": (4, 8)},  # no such module
        {"transformer_blocks.0.attn1.to_q.weight": (32, 32)},  # a module, but no LoRA key
    ],
    ids=["unknown-module", "not-lora"],
)
def test_a_file_of_wrong_keys_is_refused_naming_it(
    keys, audio_checkpoint: Path, tmp_path: Path
) -> None:
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "wrong.safetensors"
    save_file({k: torch.zeros(shape) for k, shape in keys.items()}, str(path))
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        Omni(audio_checkpoint, device="cpu", dtype="float32", lora={"wrong": str(path)})


def test_generate_audio_takes_lora(audio_checkpoint, lora_files, with_lora, tmp_path) -> None:
    """``omni generate audio --lora NAME=FILE:SCALE``: the WAV holds the clip with the adapter."""
    import io
    import wave

    from omni_core.testing import run_cli

    out = tmp_path / "dog.wav"
    args = ["--lora", f"style={lora_files['style'][0]}:0.8", "--duration", "0.2", "--steps", "3"]
    args += ["--seed", "3", "-o", str(out), "--device", "cpu", "--dtype", "float32", "-q"]
    result = run_cli("generate", "audio", str(audio_checkpoint), PROMPT, *args)
    assert result.exit_code == 0, result.output
    with wave.open(io.BytesIO(out.read_bytes())) as handle:
        frames = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    written = frames.reshape(-1, 2).astype(np.float32) / 32767.0
    expected = with_lora.generate(PROMPT, seed=3, **SMALL, lora=[{"name": "style", "scale": 0.8}])
    assert np.abs(written - np.clip(expected.audio, -1, 1)).max() <= 1.5 / 32767


def test_served_audio_takes_lora(audio_checkpoint, lora_files, with_lora, tmp_path) -> None:
    """``omni serve --lora`` (the server's ``lora`` option): ``POST /v1/audio/generate`` with a
    body's ``lora`` answers the clip ``Omni`` makes with the adapter; an unknown one is a 400."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    import io
    import wave

    from omni_core.testing import serve_on_thread

    lora = {"adapters": [{"name": "style", "path": str(lora_files["style"][0])}]}
    models = [{"id": "sa", "path": str(audio_checkpoint)}]
    body = {"model": "sa", "input": PROMPT, "audio_length": 0.2, "num_inference_steps": 3}
    body["seed"] = 3
    with serve_on_thread(models=models, state_dir=tmp_path, options={"lora": lora}) as url:
        ask = {**body, "lora": [{"name": "style", "scale": 0.8}]}
        answer = httpx.post(f"{url}/v1/audio/generate", json=ask, timeout=300)
        unknown = {**body, "lora": [{"name": "nope"}]}
        refused = httpx.post(f"{url}/v1/audio/generate", json=unknown, timeout=300)
    assert answer.status_code == 200, answer.text
    with wave.open(io.BytesIO(answer.content)) as handle:
        frames = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    served = frames.reshape(-1, 2).astype(np.float32) / 32767.0
    expected = with_lora.generate(PROMPT, seed=3, **SMALL, lora=[{"name": "style", "scale": 0.8}])
    assert np.abs(served - np.clip(expected.audio, -1, 1)).max() <= 1.5 / 32767
    assert refused.status_code == 400 and "nope" in refused.text
