"""Uploaded voices: reference audio decoded safely, stored under the state dir, prepared once.

``POST /v1/audio/voices`` stores ``<state_dir>/voices/<name>/``: ``reference.wav`` (the decoded,
capped upload as 16-bit mono), ``voice.json`` (name, transcript, consent, language, created_at)
and, per served model that clones voices, ``prepared-<key>.safetensors`` + ``.json``: what that
model's :meth:`~omni_core.speech.SpeechPipeline.prepare_voice` made of it. A later request names the
voice as ``voice`` and carries the prepared prompt; after a restart the files are read back (a
model that has no prepared file yet prepares it on first use and stores it).

Uploads are bounded before and while decoding: at most :data:`MAX_VOICE_BYTES`, containers
from :data:`AUDIO_CONTAINERS` only, decoding stops past :data:`MAX_VOICE_SECONDS`; anything
undecodable is a 400 ``invalid_audio``.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.types import PreparedVoice, ReferenceVoice

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.speech.pipeline import SpeechPipeline

#: Largest upload (bytes), shortest and longest reference (seconds).
MAX_VOICE_BYTES = 10 * 1024 * 1024
MIN_VOICE_SECONDS = 0.5
MAX_VOICE_SECONDS = 60.0
#: Container formats an upload may be (PyAV's names); anything else is refused undecoded.
AUDIO_CONTAINERS = frozenset({"wav", "flac", "mp3", "ogg", "mov,mp4,m4a,3gp,3g2,mj2", "webm"})
#: What an uploaded voice may be named (its id in requests and URLs).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)


def _invalid(
    message: str, param: str = "audio", code: str = "invalid_audio"
) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise _invalid(
            "name: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            "name",
            "invalid_value",
        )
    return name


def decode_reference(
    data: bytes, *, param: str = "audio", max_seconds: float = MAX_VOICE_SECONDS
) -> tuple[np.ndarray, int]:
    """Bytes of an audio file -> (float32 mono, rate), bounded; InvalidRequestError otherwise."""
    import av
    import numpy as np

    if len(data) > MAX_VOICE_BYTES:
        raise _invalid(
            f"{param}: larger than {MAX_VOICE_BYTES // 2**20} MB", param, "file_too_large"
        )
    parts: list[np.ndarray] = []
    rate, total = 0, 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if container.format.name not in AUDIO_CONTAINERS or not container.streams.audio:
                raise _invalid(f"{param}: not an audio file omni reads (wav, flac, mp3, ogg, m4a)")
            for frame in container.decode(audio=0):
                rate = int(frame.sample_rate)
                array = frame.to_ndarray()
                if array.dtype.kind == "i":
                    array = array.astype(np.float32) / float(np.iinfo(array.dtype).max)
                mono = array.reshape(len(frame.layout.channels), -1).mean(axis=0)
                parts.append(mono.astype(np.float32))
                total += mono.size
                if total > max_seconds * rate:
                    raise _invalid(
                        f"{param}: longer than {max_seconds:g} s; upload a shorter clip",
                        param,
                        "audio_too_long",
                    )
    except InvalidRequestError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever PyAV raises on hostile input
        raise _invalid(f"{param}: could not decode the audio ({type(exc).__name__})") from None
    if not parts or rate <= 0 or total < MIN_VOICE_SECONDS * rate:
        raise _invalid(
            f"{param}: shorter than {MIN_VOICE_SECONDS:g} s of audio", param, "audio_too_short"
        )
    audio = np.clip(np.concatenate(parts), -1.0, 1.0).astype(np.float32)
    if not np.isfinite(audio).all() or float(np.abs(audio).max()) == 0.0:
        raise _invalid(f"{param}: the audio is silent or invalid")
    return audio, rate


@dataclass
class StoredVoice:
    name: str
    transcript: str | None
    consent: str
    language: str | None
    created_at: int
    sample_rate: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.name,
            "object": "voice",
            "name": self.name,
            "language": self.language,
            "transcript": self.transcript,
            "created_at": self.created_at,
            "seconds": round(self.seconds, 3),
            "uploaded": True,
        }


class VoiceStore:
    """The uploaded voices of one server (see the module docstring)."""

    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir) / "voices"
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._prepared: dict[tuple[str, str], PreparedVoice] = {}

    def _dir(self, name: str) -> Path:
        return self.root / check_name(name)

    def list(self) -> list[StoredVoice]:
        voices = []
        for folder in sorted(self.root.iterdir()):
            voice = self.get(folder.name)
            if voice is not None:
                voices.append(voice)
        return voices

    def get(self, name: str) -> StoredVoice | None:
        if not _NAME.match(name or ""):
            return None
        meta = self.root / name / "voice.json"
        if not meta.is_file():
            return None
        try:
            return StoredVoice(**json.loads(meta.read_text()))
        except (ValueError, TypeError):
            return None

    def add(
        self,
        name: str,
        audio: np.ndarray,
        sample_rate: int,
        *,
        transcript: str | None,
        consent: str,
        language: str | None,
    ) -> StoredVoice:
        from omni_core.media.audio import encode_audio, write_bytes_atomic

        folder = self._dir(name)
        voice = StoredVoice(
            name=name,
            transcript=transcript,
            consent=consent,
            language=language,
            created_at=int(time.time()),
            sample_rate=int(sample_rate),
            seconds=len(audio) / float(sample_rate),
        )
        with self._lock:
            if (folder / "voice.json").exists():
                raise _invalid(f"name: a voice named {name!r} exists; delete it first", "name",
                               "voice_exists")  # fmt: skip
            folder.mkdir(mode=0o700, exist_ok=True)
            write_bytes_atomic(folder / "reference.wav", encode_audio(audio, sample_rate, "wav"))
            write_bytes_atomic(folder / "voice.json", json.dumps(voice.__dict__).encode())
        return voice

    def delete(self, name: str) -> bool:
        folder = self._dir(name)
        with self._lock:
            if not (folder / "voice.json").exists():
                return False
            (folder / "voice.json").unlink()
            shutil.rmtree(folder, ignore_errors=True)
            self._prepared = {k: v for k, v in self._prepared.items() if k[0] != name}
        return True

    def reference(self, name: str) -> ReferenceVoice:
        from omni_core.media.audio import decode_audio

        voice = self.get(name)
        assert voice is not None
        audio, rate = decode_audio((self._dir(name) / "reference.wav").read_bytes(), "wav")
        return ReferenceVoice(audio=audio, sample_rate=rate, transcript=voice.transcript, name=name)

    def prepared(self, name: str, model: str, pipeline: SpeechPipeline) -> ReferenceVoice:
        """The voice as ``model`` reads it: from memory, from disk, or prepared now (and kept)."""
        voice = self.get(name)
        if voice is None:
            raise _invalid(f"voice: no uploaded voice {name!r}", "voice", "voice_not_found")
        key = (name, model)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._load(name, model)
        if prepared is None:
            prepared = pipeline.prepare_voice(self.reference(name))
            self._save(name, model, prepared)
        self._prepared[key] = prepared
        return ReferenceVoice(transcript=voice.transcript, prepared=prepared, name=name)

    def _paths(self, name: str, model: str) -> tuple[Path, Path]:
        key = hashlib.sha256(model.encode()).hexdigest()[:16]
        folder = self._dir(name)
        return folder / f"prepared-{key}.safetensors", folder / f"prepared-{key}.json"

    def _save(self, name: str, model: str, prepared: PreparedVoice) -> None:
        from safetensors.torch import save_file

        from omni_core.media.audio import write_bytes_atomic

        tensors_path, info_path = self._paths(name, model)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in prepared.tensors.items()}
        tmp = tensors_path.with_suffix(".tmp")
        save_file(tensors, str(tmp))
        tmp.replace(tensors_path)
        write_bytes_atomic(info_path, json.dumps({"model": model, **prepared.info}).encode())

    def _load(self, name: str, model: str) -> PreparedVoice | None:
        from safetensors.torch import load_file

        tensors_path, info_path = self._paths(name, model)
        if not (tensors_path.is_file() and info_path.is_file()):
            return None
        info = json.loads(info_path.read_text())
        info.pop("model", None)
        return PreparedVoice(tensors=load_file(str(tensors_path)), info=info)
