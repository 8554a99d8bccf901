"""Uploaded voices: reference audio decoded within bounds (size, container, duration, silence),
stored under the state dir, the prepared prompt cached on disk and read back after a restart
(a new store on the same folder) without preparing again; names checked."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from omni_core import InvalidRequestError
from omni_core.media.audio import encode_audio
from omni_core.speech import PreparedVoice, ReferenceVoice
from omni_core.speech.pipeline import StreamingSpeechPipeline
from omni_core.speech.voices import MAX_VOICE_BYTES, VoiceStore, check_name, decode_reference

RATE = 16000


def _tone(seconds: float, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


class StatsVoices(StreamingSpeechPipeline):
    """A pipeline whose voice prompt is the reference's statistics; counts preparations."""

    clones_voices = True

    def __init__(self) -> None:
        super().__init__()
        self.prepared = 0

    @classmethod
    def from_pretrained(cls, path, options):  # pragma: no cover - not loaded from disk here
        return cls()

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        self.prepared += 1
        audio = torch.as_tensor(voice.audio)
        return PreparedVoice(
            tensors={"stats": torch.stack([audio.mean(), audio.std()])},
            info={"transcript": voice.transcript},
        )

    def synthesize(self, request) -> Iterator[np.ndarray]:  # pragma: no cover
        yield np.zeros(8, np.float32)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_reference_audio_decodes_from_common_formats(fmt: str) -> None:
    audio, rate = decode_reference(encode_audio(_tone(1.0), RATE, fmt))
    assert rate == RATE and abs(len(audio) / rate - 1.0) < 0.1
    assert audio.dtype == np.float32 and np.abs(audio).max() <= 1.0


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"RIFF\x00\x00\x00\x00WAVEjunk", "invalid_audio"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "invalid_audio"),
        (encode_audio(_tone(61.0), RATE, "flac"), "audio_too_long"),
        (encode_audio(_tone(0.2), RATE, "wav"), "audio_too_short"),
        (encode_audio(np.zeros(RATE, np.float32), RATE, "wav"), "invalid_audio"),
        (b"\x00" * (MAX_VOICE_BYTES + 1), "file_too_large"),
    ],
)
def test_bad_reference_audio_is_refused(data: bytes, code: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        decode_reference(data)
    assert info.value.code == code and info.value.param == "audio"


def test_a_video_container_is_refused_undecoded() -> None:
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=4)
        stream.width = stream.height = 16
        for _ in range(2):
            frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    with pytest.raises(InvalidRequestError) as info:
        decode_reference(buf.getvalue())
    assert info.value.code == "invalid_audio"


def test_store_persists_voices_and_their_prepared_prompts(tmp_path: Path) -> None:
    pipeline = StatsVoices()
    store = VoiceStore(tmp_path)
    store.add("ada", _tone(1.0), RATE, transcript="a tone", consent="Ada", language="en")
    with pytest.raises(InvalidRequestError) as info:
        store.add("ada", _tone(1.0), RATE, transcript=None, consent="Ada", language=None)
    assert info.value.code == "voice_exists"
    first = store.prepared("ada", "model-a", pipeline)
    assert first.prepared is not None and first.transcript == "a tone" and pipeline.prepared == 1
    store.prepared("ada", "model-a", pipeline)
    assert pipeline.prepared == 1  # cached

    again = VoiceStore(tmp_path)  # a restart
    assert [v.name for v in again.list()] == ["ada"]
    reread = again.prepared("ada", "model-a", pipeline)
    assert pipeline.prepared == 1  # read from disk, not prepared again
    assert torch.equal(reread.prepared.tensors["stats"], first.prepared.tensors["stats"])
    assert reread.prepared.info == {"transcript": "a tone"}
    again.prepared("ada", "model-b", pipeline)  # another model prepares its own once
    assert pipeline.prepared == 2
    assert again.delete("ada") and not again.delete("ada")
    assert again.list() == [] and not (tmp_path / "voices" / "ada").exists()


@pytest.mark.parametrize("name", ["", "../x", "a b", "-lead", "x" * 65])
def test_voice_names_are_checked(name: str) -> None:
    with pytest.raises(InvalidRequestError):
        check_name(name)
