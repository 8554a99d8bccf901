"""A third-party autoregressive TTS plugin on omni's runtime, through ``omni_core`` names only.

The plugin (``tests/acme_ar_tts.py``) registers its pipeline with the ``omni_register_pipelines``
hook and subclasses :class:`omni_core.speech.AutoregressiveSpeechPipeline`. These tests drive it
through
``Omni`` and the serving engine, and check the runtime's promises: batched output equals the
plugin's plain one-request loop, requests join and leave between steps, streamed deltas
concatenate to the whole output, cancellation and time limits act between steps, the host reads
device values only when a chunk is handed out, and the KV cache is the runtime's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from omni_core import Omni
from omni_core.contract.errors import RequestCancelledError, RequestTimeoutError
from omni_core.contract.host import PluginHost, set_host
from omni_core.runtime.engine import Engine
from omni_core.runtime.jobs import Job
from omni_core.speech import ReferenceVoice

TEXTS = ["hello there", "a much longer sentence to speak, with more frames", "hi",
         "the quick brown fox jumps"]  # fmt: skip


@pytest.fixture(scope="module")
def omni(acme_ar_tts, tmp_path_factory: pytest.TempPathFactory):
    acme = acme_ar_tts
    host = PluginHost(autoload=False)
    host.register_object("omni-acme-ar-tts", acme.AcmePlugin())
    previous = set_host(host)
    try:
        path = acme.build_tiny_checkpoint(tmp_path_factory.mktemp("acme") / "ckpt")
        with Omni(path, device="cpu") as loaded:
            yield loaded
    finally:
        set_host(previous)


def _reference(omni, text: str, speaker=None):
    """The plugin's plain one-request loop (the plugin module is the pipeline's own)."""
    return sys.modules[type(omni.pipeline).__module__].reference_generate(
        omni.pipeline, text, speaker
    )


def test_plugin_uses_only_public_omni_core_names(acme_ar_tts) -> None:
    from omni_core.testing import assert_imports_only_faces

    assert_imports_only_faces([Path(acme_ar_tts.__file__)], test_kit=False)


def test_one_request_equals_the_plain_loop(omni) -> None:
    pipeline = omni.pipeline
    assert omni.spec.name == "acme-ar-tts"
    stream = pipeline.open(omni.request(TEXTS[1]))
    chunks = list(stream)
    codes, audio = _reference(omni, TEXTS[1])
    assert torch.equal(stream.all_codes(), codes)
    streamed = np.concatenate([c.samples for c in chunks])
    np.testing.assert_allclose(streamed, audio.float().numpy(), atol=1e-6)
    # first chunk: 2 frames, then 3 per chunk (the plugin's schedule); the last one is shorter
    sizes = [len(c.samples) // 8 for c in chunks]
    assert sizes[0] == 2 and all(s == 3 for s in sizes[1:-1]) and sum(sizes) == codes.shape[1]


def test_batched_equals_unbatched_with_join_and_leave(omni) -> None:
    """Requests of different lengths join at different steps and leave when they end; every
    one's codes and audio equal its own plain loop."""
    pipeline = omni.pipeline
    runtime = pipeline.shared_runtime()
    streams = {}
    sizes = []
    steps_before = runtime.steps
    texts = [*TEXTS, "hello where"]  # as long as TEXTS[0]: they join together, one prefill
    for step in range(200):
        if step < len(TEXTS) * 2 and step % 2 == 0:  # one joins every other step
            text = TEXTS[step // 2]
            streams[text] = pipeline.open(omni.request(text))
            if step == 0:
                streams[texts[-1]] = pipeline.open(omni.request(texts[-1]))
        if all(s.done for s in streams.values()) and len(streams) == len(texts):
            break
        sizes.append(runtime.open_streams)
        runtime.step()
    assert max(sizes) >= 3  # several requests really shared steps
    assert sizes[-1] < max(sizes)  # and left as they ended
    for text, stream in streams.items():
        assert stream.finished and stream.error is None
        codes, audio = _reference(omni, text)
        assert torch.equal(stream.all_codes(), codes), text
        got = np.concatenate([c.samples for c in stream.poll()])
        np.testing.assert_allclose(got, audio.float().numpy(), atol=1e-6)
    assert runtime.rows > runtime.steps - steps_before  # more rows than steps: batching


def test_host_reads_only_when_a_chunk_is_handed_out(omni) -> None:
    runtime = omni.pipeline.shared_runtime()
    syncs = runtime.syncs
    stream = omni.pipeline.open(omni.request(TEXTS[3]))
    steps = runtime.steps
    chunks = list(stream)
    frames = stream.all_codes().shape[1]
    # one read per handed-out chunk, plus at most one that finds the stop with no frame left
    assert len(chunks) <= runtime.syncs - syncs <= len(chunks) + 1
    assert runtime.steps - steps > frames > runtime.syncs - syncs


def test_engine_shares_steps_and_deltas_concatenate(omni) -> None:
    pipeline = omni.pipeline
    engine = Engine(pipeline, name="acme", max_batch=8).start()
    try:
        deltas: dict[str, list[np.ndarray]] = {t: [] for t in TEXTS}
        jobs = []
        for text in TEXTS:
            request = pipeline.validate(omni.request(text))
            jobs.append(
                engine.submit(Job(request, on_chunk=lambda c, t=text: deltas[t].append(c.samples)))
            )
        for text, job in zip(TEXTS, jobs, strict=True):
            result = job.future.result(60)
            np.testing.assert_array_equal(np.concatenate(deltas[text]), result.audio)
            _, audio = _reference(omni, text)
            np.testing.assert_allclose(result.audio, audio.float().numpy(), atol=1e-6)
            assert result.timings["time_to_first_audio_s"] > 0
    finally:
        engine.stop()


@pytest.mark.parametrize("batch_seeded", [False, True])
def test_seeded_requests_share_codec_calls_only_under_batch_seeded(omni, batch_seeded) -> None:
    """The engine hands its ``batch_seeded`` to the runtime (``allow_seeded_batches``): a codec
    that ``batches_seeded`` then decodes seeded requests' chunks together; without it each
    seeded request's chunks get calls of their own (the same seed, the same bytes)."""
    pipeline = omni.pipeline
    codec = pipeline.shared_runtime().stages.codec
    rows: list[int] = []

    def counted(codes: torch.Tensor, context: int) -> torch.Tensor:
        rows.append(codes.shape[0])
        return type(codec).decode(codec, codes, context)

    codec.decode = counted  # type: ignore[method-assign]
    engine = Engine(pipeline, name="acme", max_batch=8, batch_seeded=batch_seeded).start()
    try:
        jobs = [
            engine.submit(Job(pipeline.validate(omni.request(text, seed=i))))
            for i, text in enumerate(TEXTS)
        ]
        results = [job.future.result(60) for job in jobs]
    finally:
        engine.stop()
        del codec.decode
        pipeline.shared_runtime().allow_seeded_batches(False)
    for text, result in zip(TEXTS, results, strict=True):
        _, audio = _reference(omni, text)
        np.testing.assert_allclose(result.audio, audio.float().numpy(), atol=1e-6)
    assert (max(rows) > 1) is batch_seeded, rows


def test_cancellation_and_time_limit_between_steps(omni) -> None:
    pipeline = omni.pipeline
    runtime = pipeline.shared_runtime()
    long_text = TEXTS[1]
    cancelled = pipeline.open(omni.request(long_text))
    timed = pipeline.open(omni.request(long_text), timeout_s=0.0)
    kept = pipeline.open(omni.request(TEXTS[0]))
    runtime.step()
    assert isinstance(timed.error, RequestTimeoutError)
    cancelled.cancel("the client went away")
    runtime.step()
    assert isinstance(cancelled.error, RequestCancelledError)
    with pytest.raises(RequestCancelledError):
        list(cancelled)
    list(kept)  # the others continue unharmed
    codes, _ = _reference(omni, TEXTS[0])
    assert torch.equal(kept.all_codes(), codes)
    assert runtime.open_streams == 0


def test_engine_cancels_a_running_stream(omni, cancel_running) -> None:
    cancel_running(omni.pipeline, omni.pipeline.validate(omni.request(TEXTS[1])))


def test_cloning_from_a_reference_voice(omni) -> None:
    wav = np.sin(np.linspace(0, 40, 4000)).astype(np.float32)
    reference = ReferenceVoice(audio=wav, sample_rate=16000, transcript="a sine")
    prepared = omni.pipeline.prepare_voice(reference)
    inline = omni.generate(TEXTS[0], reference=reference)
    stored = omni.generate(TEXTS[0], reference=ReferenceVoice(prepared=prepared, name="sine"))
    plain = omni.generate(TEXTS[0])
    np.testing.assert_array_equal(inline.audio, stored.audio)
    codes, _ = _reference(omni, TEXTS[0], prepared.tensors["speaker"])
    assert not np.array_equal(inline.audio, plain.audio)
    assert codes.shape[1] * 8 == len(inline.audio)


def test_cli_speakers_for_a_one_voice_model_is_one_line_and_exit_2(omni, tmp_path) -> None:
    """``omni generate speech --speaker`` is the request's ``speakers`` for any family: a model
    that speaks one voice per request (``max_speakers`` 1, this plugin's) refuses it."""
    from omni_core.testing import run_cli

    target = tmp_path / "out.wav"
    args = ["generate", "speech", TEXTS[0], "--model", str(omni.path), "--device", "cpu"]
    result = run_cli(*args, "--speaker", "1=default", "-o", str(target), "-q")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "Error: speakers: this model speaks one voice per request (give voice instead)"
    ]
    assert not target.exists()
