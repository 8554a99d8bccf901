"""Qwen3-TTS's static-shape decode path (``cuda_graphs``; on CPU it runs without capture): greedy
codes equal the eager stages' and ``reference_generate``'s with requests joining and leaving
between steps and batches padded to buckets; sampling is seeded per row (a seeded request draws
the same codes in any batch, graphs or not); the load option is checked; the pipeline reports
its path."""

from __future__ import annotations

import pytest
import torch

from omni_core import ConfigError, Omni

GREEDY = {"temperature": 0, "max_new_tokens": 24}
TEXTS = [
    "Hello there, how are you?",
    "A second and longer sentence to speak today.",
    "Hi!",
    "Four requests at once make a padded bucket of four rows.",
    "And a fifth one joins late.",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory):
    from omni_qwen.testing import build_tiny_qwen3_tts

    return build_tiny_qwen3_tts(tmp_path_factory.mktemp("qwen3-tts-graphs") / "cv", "custom_voice")


@pytest.fixture(scope="module")
def static(checkpoint) -> Omni:
    return Omni(checkpoint, device="cpu", cuda_graphs="static")


@pytest.fixture(scope="module")
def eager(checkpoint) -> Omni:
    return Omni(checkpoint, device="cpu", cuda_graphs="off")


def _interleaved(omni: Omni, requests: list[dict], join_every: int = 1) -> list:
    """Open a request every ``join_every`` steps; step until every stream ends."""
    pipeline = omni.pipeline
    runtime = pipeline.shared_runtime()
    pending = [pipeline.validate(omni.request(**r)) for r in requests]
    streams, step = [], 0
    while pending or not all(s.done for s in streams):
        if pending and step % join_every == 0:
            streams.append(pipeline.open(pending.pop(0)))
        runtime.step()
        step += 1
    for stream in streams:
        assert stream.error is None, stream.error
    return streams


def _assert_reference(omni: Omni, requests: list[dict], streams: list) -> None:
    from omni_qwen.tts import reference_generate

    for request, stream in zip(requests, streams, strict=True):
        ref = reference_generate(
            omni.pipeline.model,
            request["prompt"],
            speaker=request["voice"],
            max_new_tokens=request["max_new_tokens"],
        )
        assert torch.equal(stream.all_codes().cpu(), ref.codes)


def _audio(stream) -> torch.Tensor:
    """Every sample a stream handed out (its ready chunks, joined)."""
    return torch.cat([torch.from_numpy(chunk.samples) for chunk in stream.poll()])


def _requests(omni: Omni, budgets: list[int]) -> list[dict]:
    speakers = omni.pipeline.model.speakers
    return [
        {
            "prompt": TEXTS[i],
            "voice": speakers[i % len(speakers)],
            "temperature": 0,
            "max_new_tokens": budget,
        }
        for i, budget in enumerate(budgets)
    ]


def test_static_path_greedy_codes_equal_reference_with_joins_and_leaves(static) -> None:
    # budgets differ: rows leave at different steps; joins every 3 steps: slots 0..4 in use,
    # batches of 1..5 rows padded to buckets 1, 2, 4, 8 (of the 64 slots)
    requests = _requests(static, [24, 9, 30, 14, 20])
    streams = _interleaved(static, requests, join_every=3)
    _assert_reference(static, requests, streams)
    report = static.pipeline.decode_report()
    assert report["path"] == "static"
    talker = report["stages"]["talker"]
    assert talker["eager_calls"] > 0 and talker["replays"] == 0


def test_static_path_equals_eager_stages_when_a_slot_frees_in_the_middle(static, eager) -> None:
    """A short request leaves while others go on; a new one takes its (lower) slot."""
    requests = _requests(static, [20, 5, 20, 16])
    got = [s.all_codes() for s in _interleaved(static, requests, join_every=4)]
    want = [s.all_codes() for s in _interleaved(eager, requests, join_every=4)]
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert eager.pipeline.decode_report()["path"] == "eager"


def test_the_graph_safe_draw_is_seeded_per_row(checkpoint) -> None:
    """The draw is multinomial's over the filtered weights, its noise keyed by each row's seed,
    frame and codebook: a row draws the same token alone or beside any others."""
    from omni_qwen.tts.stages import Sampling, sample

    logits = torch.randn(6, 97, generator=torch.Generator().manual_seed(1))
    temperature = torch.tensor([0.9, 0.0, 1.3, 0.7, 0.5, 1.0])
    top_k = torch.tensor([50, 0, 5, 0, 1, 97])
    top_p = torch.tensor([1.0, 1.0, 0.8, 0.5, 1.0, 0.95])
    seeds = torch.tensor([11, 12, 13, 14, 15, 16])
    frames = torch.tensor([0, 3, 7, 1, 2, 40])

    def settings(rows: list[int], seed: torch.Tensor = seeds) -> Sampling:
        pick = torch.tensor(rows)
        return Sampling(temperature[pick], top_k[pick], top_p[pick], True, seed[pick])

    def weights() -> torch.Tensor:  # the filtered distribution, in token order
        ordered, index = (logits / temperature.clamp(min=1e-5)[:, None]).sort(-1, descending=True)
        probs = ordered.softmax(-1)
        ranks = torch.arange(97)[None]
        k = torch.where(top_k > 0, top_k, 97)[:, None]
        keep = (ranks < k) & ((probs.cumsum(-1) - probs) < top_p[:, None])
        keep[:, 0] = True
        sorted_w = ordered.masked_fill(~keep, float("-inf")).softmax(-1)
        return torch.zeros_like(sorted_w).scatter(1, index, sorted_w)

    everyone = sample(logits, settings(list(range(6))), frames, group=3)
    for row in range(6):  # alone, and beside another row
        alone = sample(logits[row : row + 1], settings([row]), frames[row : row + 1], group=3)
        pair = [row, (row + 2) % 6]
        beside = sample(logits[pair], settings(pair), frames[pair], group=3)
        assert alone.item() == everyone[row].item() == beside[0].item()
    assert everyone[1].item() == logits[1].argmax().item()  # temperature 0: greedy
    # over many seeds the tokens follow the filtered weights (and a new frame draws anew)
    draws = torch.stack(
        [
            sample(logits, settings(list(range(6)), seeds * 0 + seed), frames, group=0)
            for seed in range(4000)
        ]
    )
    expected = weights()
    for row in (0, 2, 3, 5):
        counts = torch.bincount(draws[:, row], minlength=97).float() / len(draws)
        assert (counts - expected[row]).abs().max() < 0.03
        assert counts[expected[row] == 0].sum() == 0  # filtered tokens are never drawn
    again = sample(logits, settings(list(range(6))), frames + 1, group=3)
    assert not torch.equal(again, everyone)


def test_cuda_graphs_option_is_checked_and_defaults_to_eager_off_cuda(checkpoint) -> None:
    with pytest.raises(ConfigError, match="cuda_graphs"):
        Omni(checkpoint, device="cpu", cuda_graphs="sometimes")
    default = Omni(checkpoint, device="cpu")
    assert default.pipeline.decode_report()["path"] == "not built yet"
    list(default.stream(TEXTS[2], **GREEDY))
    assert default.pipeline.decode_report() == {
        "cuda_graphs": "on",
        "path": "eager",
        "stages": None,
        "codec": {"path": "eager"},
        "fused_layers": {"mode": "off", "path": "layers", "reason": None, "compile_s": 0.0},
    }


def test_static_path_crosses_key_buckets(checkpoint, eager, monkeypatch) -> None:
    """Rows grow across key buckets (here 32 -> 64 -> 128 keys) while a short one leaves: the
    steps are rebuilt at each width; codes still equal the eager stages'."""
    from omni_core.runtime import bucket_for
    from omni_qwen.tts import graphs

    monkeypatch.setattr(graphs, "key_bucket", lambda n: bucket_for(n, (32,)))
    omni = Omni(checkpoint, device="cpu", cuda_graphs="static")
    requests = _requests(omni, [70, 12])
    requests[0]["min_new_tokens"] = 65  # no early end of speech
    got = [s.all_codes() for s in _interleaved(omni, requests, join_every=1)]
    want = [s.all_codes() for s in _interleaved(eager, requests, join_every=1)]
    assert got[0].shape[1] >= 65
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    talker = omni.pipeline.shared_runtime().stages.decoder
    assert {key[1] for key in talker._fns} >= {64, 128}


def test_the_capture_path_emulated_on_cpu_gives_the_reference_codes(
    checkpoint, emulate_capture, monkeypatch
) -> None:
    """Every batch bucket captured at the first step (on stale inputs, warm-up calls repeated),
    replays overwriting their outputs: codes still equal reference_generate. (The codec's
    buckets stop at 4 rows here: three requests never need more, and each emulated capture of
    a 64-row chunk costs seconds on the CPU.)"""
    from omni_qwen.tts import codec_graphs

    monkeypatch.setattr(codec_graphs, "batch_buckets", lambda limit: [1, 2, 4])
    omni = Omni(checkpoint, device="cpu", cuda_graphs="static", codec_graphs="on")
    stages = omni.pipeline.shared_runtime().stages
    for runner in (stages.decoder.runner, stages.frame_stages[0].runner, stages.codec.runner):
        emulate_capture(runner)
    requests = _requests(omni, [20, 8, 16])
    streams = _interleaved(omni, requests, join_every=2)
    _assert_reference(omni, requests, streams)
    report = omni.pipeline.decode_report()
    assert report["path"] == "cuda-graphs"
    # the codec: the schedule's shapes for every batch bucket at the first chunk, replayed
    assert report["codec"]["captured"] >= len(stages.codec.schedule_shapes())
    assert report["codec"]["replays"] > 0
    talker, predictor = report["stages"]["talker"], report["stages"]["code_predictor"]
    # buckets 1..64 in both sampling modes at the first step
    assert talker["captured"] == 14 and predictor["captured"] == 14
    assert talker["replays"] > 0 and talker["eager_calls"] == 0


def test_fused_layers_equal_the_transformers_layers(checkpoint) -> None:
    """The fused halves (eager off CUDA) compute exactly what ``Qwen3DecoderLayer`` does: the
    same codes and bit-identical audio as ``fused_layers=off``, alone and batched."""
    with pytest.raises(ConfigError, match="fused_layers"):
        Omni(checkpoint, device="cpu", fused_layers="maybe")
    layers = Omni(checkpoint, device="cpu", fused_layers="off", cuda_graphs="static")
    # "compiled" compiles only on CUDA: on the CPU it is the eager halves too
    fused = Omni(checkpoint, device="cpu", fused_layers="compiled", cuda_graphs="static")
    requests = _requests(layers, [12, 20])
    want = _interleaved(layers, requests)
    got = _interleaved(fused, requests)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.all_codes(), b.all_codes())
        assert torch.equal(_audio(a), _audio(b))
    assert layers.pipeline.decode_report()["fused_layers"]["path"] == "layers"
    assert fused.pipeline.decode_report()["fused_layers"]["path"] == "fused (eager)"


def test_codec_static_shapes_give_the_eager_audio(checkpoint, eager) -> None:
    """The codec padded to static shapes (rows to a bucket, a short last chunk to the chunk
    length) gives the eager stage's samples: every stage is causal."""
    with pytest.raises(ConfigError, match="codec_graphs"):
        Omni(checkpoint, device="cpu", codec_graphs="sometimes")
    omni = Omni(checkpoint, device="cpu", cuda_graphs="static", codec_graphs="on")
    requests = _requests(omni, [5, 13, 22])  # last chunks of 3, 3 and 4 frames
    got = _interleaved(omni, requests, join_every=3)
    want = _interleaved(eager, requests, join_every=3)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.all_codes(), b.all_codes())
        torch.testing.assert_close(_audio(a), _audio(b), rtol=1e-4, atol=1e-5)
    codec = omni.pipeline.shared_runtime().stages.codec
    assert codec.shape(3, 0, 2) == (4, 0, 2) and codec.shape(1, 25, 3) == (1, 25, 8)
    assert codec.shape(1, 0, 1 << 20) is None  # a whole answer at once: eagerly


def test_compiled_halves_that_fail_fall_back_to_the_eager_ones(checkpoint) -> None:
    """A compiler failure in a compiled half is logged and reported, never a failed request:
    the halves then run eagerly and give the same hidden states."""
    from omni_qwen.tts.fused import FusedLayers

    omni = Omni(checkpoint, device="cpu", fused_layers="off")
    stack = omni.pipeline.model.talker.model
    fused = FusedLayers(stack.layers, compile=False)
    failing = FusedLayers(stack.layers, compile=False)
    failing.compiled = True

    def broken(*args):
        raise RuntimeError("no compiler here")

    failing._inputs = failing._outputs = broken
    hidden = torch.randn(2, 3, stack.config.hidden_size)
    positions = torch.arange(3).expand(2, 3)
    embeddings = stack.rotary_emb(hidden, positions)
    with torch.inference_mode():
        want = fused(hidden, embeddings, None, None)
        got = failing(hidden, embeddings, None, None)
    assert torch.equal(got, want)
    assert not failing.compiled and "no compiler here" in failing.reason
