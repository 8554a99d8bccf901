"""Prometheus metrics of one server: queues, batches, step time, latency and device memory.

Each app gets its own :class:`prometheus_client.CollectorRegistry`, so several servers (tests,
benchmarks) can live in one process without "duplicated timeseries" errors.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)


class Metrics:
    """The server's metrics; also the engine's :class:`~omni_core.runtime.jobs.EngineObserver`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue = Gauge(
            "omni_queue_depth", "Requests waiting for a worker.", ["model"], registry=r
        )
        self.running_gauge = Gauge(
            "omni_running_requests", "Requests being generated.", ["model"], registry=r
        )
        self.batch_size = Histogram(
            "omni_batch_size",
            "Requests per denoising step call.",
            ["model"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.step_time = Histogram(
            "omni_step_seconds",
            "Host time of one step() call (launch time on asynchronous devices).",
            ["model"],
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.peak_memory_gauge = Gauge(
            "omni_peak_device_memory_bytes", "Peak device memory allocated.", ["model"], registry=r
        )
        self.latency = Histogram(
            "omni_request_latency_seconds",
            "Request latency by endpoint.",
            ["endpoint", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "omni_requests",
            "Requests by endpoint and HTTP status.",
            ["endpoint", "status"],
            registry=r,
        )
        self.jobs = Counter(
            "omni_video_jobs", "Video jobs by final status.", ["model", "status"], registry=r
        )
        self.ready = Gauge(
            "omni_model_ready", "1 once a model is loaded and warmed.", ["model"], registry=r
        )

    # EngineObserver
    def queue_depth(self, model: str, depth: int) -> None:
        self.queue.labels(model).set(depth)

    def running(self, model: str, count: int) -> None:
        self.running_gauge.labels(model).set(count)

    def batch(self, model: str, size: int, seconds: float) -> None:
        self.batch_size.labels(model).observe(size)
        self.step_time.labels(model).observe(seconds)

    def peak_memory(self, model: str, nbytes: int) -> None:
        self.peak_memory_gauge.labels(model).set(nbytes)

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        self.latency.labels(endpoint, str(status)).observe(seconds)
        self.requests.labels(endpoint, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


#: The methods that get their own label; any other (a made-up method) is ``other``, so junk
#: requests cannot grow the number of series.
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def endpoint_label(scope: dict[str, Any]) -> str:
    """``"METHOD /route/{template}"``: a fixed method set and route templates, never raw paths
    (an unmatched path is ``other``)."""
    method = scope.get("method", "")
    route = scope.get("route")
    path = getattr(route, "path", None)
    return f"{method if method in METHODS else 'other'} {path if path else 'other'}"


class MetricsMiddleware:
    """Per-route latency and status counts (route templates as labels, never raw paths); also
    echoes the request id a route chose as ``x-request-id``."""

    def __init__(self, app: Callable[..., Awaitable[None]], metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = [500]

        async def wrapped_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                rid = scope.get("state", {}).get("request_id")
                if rid:
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())],
                    }
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                endpoint = endpoint_label(scope)
                self.metrics.observe_request(endpoint, status[0], time.perf_counter() - t0)
            await send(message)

        await self.app(scope, receive, wrapped_send)
