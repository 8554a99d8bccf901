"""Load and batching: 64 requests at concurrency 16 end cleanly; step batching changes nothing.

Batching on vs off runs the real pipelines behind their own engines in this process (no HTTP),
so the comparison isolates the engine.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from omni_core.contract.errors import RequestCancelledError, RequestTimeoutError
from omni_core.runtime.engine import Engine
from omni_core.runtime.jobs import Job


def test_serve_64_requests_at_concurrency_16_complete_or_429(live_server) -> None:
    live_server.need("qwen")
    import httpx

    async def main() -> list[httpx.Response]:
        semaphore = asyncio.Semaphore(16)
        headers = {"Authorization": f"Bearer {live_server.api_key}"}
        async with httpx.AsyncClient(
            base_url=live_server.url, headers=headers, timeout=300
        ) as client:

            async def one(i: int) -> httpx.Response:
                async with semaphore:
                    return await client.post(
                        "/v1/images/generations",
                        json={
                            "model": "qwen",
                            "prompt": f"prompt {i}",
                            "size": "32x32",
                            "num_inference_steps": 2,
                        },  # unseeded: a seeded request steps alone (test_serve_reproducible)
                    )

            return await asyncio.gather(*(one(i) for i in range(64)))

    before = _batch_counts(live_server)
    responses = asyncio.run(main())
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(200) >= 8, codes  # at least one full queue
    # 4 running + 8 queued < 16 clients: back-pressure must have answered some of them.
    assert codes.count(429) > 0, codes
    for r in responses:
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["type"] == "rate_limit_error"
        else:
            assert len(r.json()["data"]) == 1
    after = _batch_counts(live_server)
    # Step-level batching happened: more requests were stepped than step() calls were made.
    steps = after["count"] - before["count"]
    stepped = after["sum"] - before["sum"]
    assert steps > 0 and stepped > steps, (before, after)


def _batch_counts(live_server: Any) -> dict[str, float]:
    import httpx

    text = httpx.get(f"{live_server.url}/metrics").text
    out = {"count": 0.0, "sum": 0.0}
    for line in text.splitlines():
        if line.startswith('omni_batch_size_count{model="qwen"}'):
            out["count"] = float(line.split()[-1])
        elif line.startswith('omni_batch_size_sum{model="qwen"}'):
            out["sum"] = float(line.split()[-1])
    return out


class BatchSizes:
    """An engine observer that records the size of every step batch into ``sizes``."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def queue_depth(self, model: str, depth: int) -> None: ...
    def running(self, model: str, count: int) -> None: ...
    def peak_memory(self, model: str, nbytes: int) -> None: ...

    def batch(self, model: str, size: int, seconds: float) -> None:
        self.sizes.append(size)


def _run_all(engine: Engine, requests: list[Any]) -> list[Any]:
    engine.start()
    try:
        jobs = [engine.submit(Job(r)) for r in requests]
        return [j.future.result(timeout=300) for j in jobs]
    finally:
        engine.stop(timeout=30)


@pytest.fixture(scope="module")
def omni_models(checkpoints) -> dict[str, Any]:
    """Fresh pipelines (not the live server's) so their engines do not share a worker."""
    from omni_core import Omni

    out = {}
    for model_id in ("wan", "qwen"):
        if model_id in checkpoints.paths:
            out[model_id] = Omni(checkpoints.paths[model_id])
    return out


@pytest.mark.parametrize("model_id", ["qwen", "wan"])
def test_serve_batching_on_and_off_give_the_same_outputs(omni_models, model_id: str) -> None:
    if model_id not in omni_models:
        pytest.skip(f"{model_id} is not available")
    omni = omni_models[model_id]
    size = {"width": 32, "height": 32} | ({"num_frames": 5} if model_id == "wan" else {})
    requests = [
        omni.request(f"prompt number {i}", seed=i, num_inference_steps=3, **size) for i in range(4)
    ]
    observed: list[int] = []
    sizes = BatchSizes(observed)
    # batch_seeded: these seeded requests share steps (by default each would step alone)
    engine = Engine(omni.pipeline, max_batch=4, observer=sizes, batch_seeded=True)
    batched = _run_all(engine, requests)
    assert max(observed) == 4, observed
    observed.clear()
    single = _run_all(Engine(omni.pipeline, max_batch=1, observer=sizes), requests)
    assert set(observed) == {1}
    for a, b in zip(batched, single, strict=True):
        left, right = _pixels(a), _pixels(b)
        assert left.shape == right.shape
        # Batched matmuls may differ from unbatched ones in the last float bits: at most one
        # 8-bit level on a few pixels.
        diff = np.abs(left.astype(np.int16) - right.astype(np.int16))
        assert diff.max() <= 1, diff.max()
        assert (diff > 0).mean() < 0.01
    # And a batched output equals the plain Python API's (run_to_completion) output.
    direct = omni.generate(f"prompt number {2}", seed=2, num_inference_steps=3, **size)
    assert (
        np.abs(_pixels(direct).astype(np.int16) - _pixels(batched[2]).astype(np.int16)).max() <= 1
    )


def _pixels(result: Any) -> np.ndarray:
    if result.video is not None:
        return np.asarray(result.video)
    return np.stack([np.asarray(im) for im in result.images])


def test_serve_engine_cancel_timeout_and_back_pressure(omni_models) -> None:
    if "qwen" not in omni_models:
        pytest.skip("qwen is not available")
    omni = omni_models["qwen"]
    progress: list[int] = []
    engine = Engine(omni.pipeline, max_batch=1, max_queue=2).start()
    try:
        long = Job(
            omni.request("long", num_inference_steps=50, width=32, height=32),
            on_progress=lambda done, total: progress.append(done),
        )
        engine.submit(long)
        deadline = time.monotonic() + 60
        while long.started_at is None and time.monotonic() < deadline:
            time.sleep(0.001)  # the worker admits it: the queue is empty again
        queued = [
            engine.submit(Job(omni.request("q", num_inference_steps=2, width=32, height=32)))
            for _ in range(2)
        ]
        from omni_core.contract.errors import QueueFullError

        with pytest.raises(QueueFullError) as info:
            engine.submit(Job(omni.request("overflow", width=32, height=32)))
        assert info.value.retry_after >= 1
        engine.cancel(queued[1])  # cancelled while queued: at once
        with pytest.raises(RequestCancelledError):
            queued[1].future.result(timeout=5)
        deadline = time.monotonic() + 60
        while not progress and time.monotonic() < deadline:
            time.sleep(0.01)
        at_cancel = progress[-1]
        engine.cancel(long)
        with pytest.raises(RequestCancelledError):
            long.future.result(timeout=60)
        assert progress[-1] <= at_cancel + 1, "stopped within one denoising step"
        assert queued[0].future.result(timeout=60).images
        slow = Job(
            omni.request("slow", num_inference_steps=50, width=32, height=32), timeout_s=0.05
        )
        engine.submit(slow)
        with pytest.raises(RequestTimeoutError):
            slow.future.result(timeout=60)
        blocker = engine.submit(
            Job(omni.request("blocker", num_inference_steps=20, width=32, height=32))
        )
        stale = engine.submit(Job(omni.request("stale", width=32, height=32), timeout_s=0.01))
        with pytest.raises(RequestTimeoutError, match="in queue"):
            stale.future.result(timeout=60)
        assert blocker.future.result(timeout=60).images
    finally:
        engine.stop(timeout=30)


def test_serve_client_disconnect_cancels_the_request(live_server, wait_for, monkeypatch) -> None:
    live_server.need("qwen")
    import httpx

    engine = live_server.state.models["qwen"].engine
    pipeline = engine.pipeline
    original = pipeline.step

    def slow_step(states: list[Any]) -> None:  # 50 steps take >= 2.5 s, the client waits 0.5 s
        time.sleep(0.05)
        original(states)

    monkeypatch.setattr(pipeline, "step", slow_step)
    wait_for(lambda: engine.running_count == 0 and engine.queue_depth == 0)
    before = _batch_counts(live_server)["count"]
    with pytest.raises(httpx.ReadTimeout), live_server.http(timeout=0.5) as client:
        client.post(
            "/v1/images/generations",
            json={
                "model": "qwen",
                "prompt": "abandoned",
                "size": "32x32",
                "num_inference_steps": 50,
            },
        )
    wait_for(lambda: engine.running_count == 0 and engine.queue_depth == 0, timeout=60)
    steps = _batch_counts(live_server)["count"] - before
    assert steps < 50, f"{steps} steps ran for a request whose client went away"


@pytest.mark.parametrize("window_s", [0.0, 0.5])
def test_admit_window_lets_requests_sent_together_share_the_first_step(
    omni_models, window_s: float
) -> None:
    """An idle engine starts a lone arrival at once, so a request sent 50 ms later waits a whole
    step; with ``admit_window_s`` the idle engine waits for it and both share the first step."""
    if "qwen" not in omni_models:
        pytest.skip("qwen is not available")
    omni = omni_models["qwen"]
    requests = [
        omni.request(f"prompt {i}", num_inference_steps=3, width=32, height=32) for i in range(2)
    ]
    observed: list[int] = []
    engine = Engine(
        omni.pipeline, max_batch=4, observer=BatchSizes(observed), admit_window_s=window_s
    )
    engine.start()
    try:
        first = engine.submit(Job(requests[0]))
        time.sleep(0.05)
        second = engine.submit(Job(requests[1]))
        for job in (first, second):
            job.future.result(timeout=120)
    finally:
        engine.stop(timeout=30)
    assert observed[0] == (2 if window_s else 1), observed
    with pytest.raises(ValueError, match="admit_window_s"):
        Engine(omni.pipeline, admit_window_s=-1)


@pytest.mark.parametrize("model_id", ["qwen", "wan"])
def test_serve_requests_join_between_steps(omni_models, model_id: str) -> None:
    """A request that arrives while another is mid-way joins at the next step boundary (batched
    with it where the pipeline's batch_key allows) and both match a solo run."""
    if model_id not in omni_models:
        pytest.skip(f"{model_id} is not available")
    omni = omni_models[model_id]
    size = {"width": 32, "height": 32} | ({"num_frames": 5} if model_id == "wan" else {})
    first = omni.request("first prompt", seed=1, num_inference_steps=8, **size)
    late = [
        omni.request(f"late prompt {i}", seed=10 + i, num_inference_steps=8, **size)
        for i in range(2)
    ]
    progressed = []
    engine = Engine(omni.pipeline, max_batch=4).start()
    try:
        head = engine.submit(Job(first, on_progress=lambda d, t: progressed.append(d)))
        deadline = time.monotonic() + 60
        while len(progressed) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        tail = [engine.submit(Job(r)) for r in late]
        results = [j.future.result(timeout=120) for j in [head, *tail]]
    finally:
        engine.stop(timeout=30)
    assert progressed[-1] == 8
    solo = _run_all(Engine(omni.pipeline, max_batch=1), [first, *late])
    for a, b in zip(results, solo, strict=True):
        diff = np.abs(_pixels(a).astype(np.int16) - _pixels(b).astype(np.int16))
        assert diff.max() <= 1, diff.max()
