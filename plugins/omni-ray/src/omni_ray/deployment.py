"""The Ray Serve application: one :class:`ModelReplica` deployment per model, one
:class:`Ingress` in front.

Each replica runs omni-core's own server app (``create_app``: the same routes, limits and error
bodies as ``omni serve``) around one omni engine; the ingress only routes a request to the
deployment of the model it names and streams the answer back. Video jobs live in the shared job
store: whichever replica has room claims a waiting job, and a replica that dies hands its jobs
to the others (omni-core's leases). Ray Serve places, restarts, health-checks, autoscales
(:mod:`omni_ray.autoscale`, on queue depth) and drains the replicas.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from typing import Any

from ray import serve

from omni_ray.asgi import call_app, header, pack, read_body
from omni_ray.metrics import BOARD_NAME, merge_metrics

log = logging.getLogger("omni.ray")

#: Seconds between two reports of a replica to the board (health, metrics).
REPORT_S = 2.0
#: A replica whose last report is older than this is left out of /health and /metrics.
STALE_S = 15.0
#: Routes answered for any model by any deployment (the stores are shared).
_ANY = re.compile(r"^/v1/(videos/[^/]+(/content)?|videos|images/files/[^/]+)$")
#: Where a request that names no model goes: the first model of the first modality that matches
#: (a chat request goes to a chat model, else to an image model, as ``omni serve`` picks).
_MODALITY = (("/v1/videos", "video"), ("/v1/images", "image"), ("/v1/chat", "chat"))
_MODALITY += (("/v1/chat", "image"), ("/v1/audio", "speech"))
_FORM_MODEL = re.compile(rb'name="model"\r\n(?:[^\r\n]+\r\n)*\r\n([^\r\n]{1,200})\r\n')


class ModelReplica:
    """One replica: omni-core's server state and app for one model, in this Ray actor."""

    def __init__(self, source: dict[str, Any], server: dict[str, Any]) -> None:
        import ray

        from omni_core.serving import ServerConfig, create_app

        # The replica's app is never bound to a socket: requests come relayed by the ingress
        # with the client's Host header, judged against the ingress's own bind (``host``).
        config = ServerConfig(models=[source], port=0, **server)
        self.model_id = source["id"]
        self.app = create_app(config)
        self.state = self.app.state.omni
        self.state.start()  # loads and warms the model on a thread, as omni serve does
        self.served = self.state.models[self.model_id]
        while self.served.status == "loading":
            time.sleep(0.1)
        if self.served.status != "ready":
            self.state.shutdown()
            raise RuntimeError(f"model {self.model_id} failed to load: {self.served.error}")
        context = serve.get_replica_context()
        self.replica = context.replica_id.unique_id
        self.board = ray.get_actor(BOARD_NAME, namespace="serve")
        self._closed = threading.Event()
        self._reporter = threading.Thread(target=self._report_loop, daemon=True)
        self._reporter.start()
        log.info("replica %s of %s ready (pid %d)", self.replica, self.model_id, os.getpid())

    # -- what the ingress calls ------------------------------------------------------------------

    async def forward(self, request: dict[str, Any]) -> Any:
        """Run one packed HTTP request through this replica's app; yields ASGI messages."""
        async for message in call_app(self.app, request):
            yield message

    async def describe(self) -> dict[str, Any]:
        return self.served.describe()

    # -- what Ray Serve calls --------------------------------------------------------------------

    def check_health(self) -> None:
        """Ray Serve replaces a replica whose check raises (its model's worker died, say)."""
        if not self.served.check_health() and not self.state.stopping:
            raise RuntimeError(f"model {self.model_id}: {self.served.error or 'not ready'}")

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Queue depth for :func:`omni_ray.autoscale.queue_depth_policy`: the video jobs
        waiting in the shared store for this model, and this replica's own engine load."""
        import asyncio

        waiting = await asyncio.to_thread(
            self.state.store.count, status="queued", model=self.model_id
        )
        engine = self.served.engine
        load = engine.queue_depth + engine.running_count if engine is not None else 0
        return {"omni_store_queued": float(waiting), "omni_replica_load": float(load)}

    def __del__(self) -> None:
        """Graceful stop (Ray Serve waited for the ongoing requests): the engine finishes
        running work within the grace period; queued and cut-off video jobs go back to the
        store, where the other replicas take them."""
        closed = getattr(self, "_closed", None)
        if closed is None or closed.is_set():
            return
        closed.set()
        try:
            self.board.drop.remote(self.replica)
        except Exception:  # noqa: BLE001 - the board may be gone first
            pass
        self.state.shutdown()

    # -- health and metrics, pushed --------------------------------------------------------------

    def _report_loop(self) -> None:
        while not self._closed.wait(REPORT_S):
            try:
                self.board.put.remote(
                    self.replica,
                    self.model_id,
                    self.served.status if not self.state.stopping else "stopping",
                    self.state.metrics.render().decode(),
                    os.getpid(),
                )
            except Exception:  # a missed report only ages the last one
                log.debug("report to the board failed", exc_info=True)


class Ingress:
    """The one HTTP entry: routes each request to its model's deployment (streaming the reply),
    and answers ``/health``, ``/metrics`` and ``/v1/models`` for all replicas."""

    def __init__(self, handles: dict[str, Any], max_body_bytes: int) -> None:
        import ray

        self.handles = handles
        self.max_body_bytes = max_body_bytes
        self.board = ray.get_actor(BOARD_NAME, namespace="serve")
        self._modality: dict[str, str] = {}

    def __serve_build_asgi_app__(self) -> Any:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await self.asgi(scope, receive, send)  # a plain coroutine function: ASGI 3

        return app

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/health" and method == "GET":
            return await self._health(send)
        if path == "/metrics" and method == "GET":
            return await self._metrics(send)
        body = await read_body(receive, self.max_body_bytes)
        if body is None:
            return await _error(send, 413, "the request body is too large", "request_too_large")
        request = pack(scope, body)
        if path.rstrip("/") == "/v1/models" and method == "GET":
            return await self._models(request, send)
        target = await self._target(request)
        if target is None:
            return await _error(
                send,
                404,
                f"the model {self._named(request)!r} does not exist on this server; serving: "
                f"{', '.join(self.handles)}",
                "model_not_found",
                param="model",
            )
        await self._relay(self.handles[target], request, send)

    # -- routing ---------------------------------------------------------------------------------

    def _named(self, request: dict[str, Any]) -> str | None:
        """The ``model`` a body names (JSON, multipart or urlencoded), if any."""
        ctype = header(request, b"content-type")
        body = request["body"]
        try:
            if ctype.startswith("application/json"):
                value = json.loads(body).get("model")
            elif ctype.startswith("multipart/form-data"):
                match = _FORM_MODEL.search(body)
                value = match.group(1).decode() if match else None
            elif ctype.startswith("application/x-www-form-urlencoded"):
                from urllib.parse import parse_qs

                value = parse_qs(body.decode())["model"][-1]
            else:
                value = None
        except (ValueError, AttributeError, KeyError, UnicodeDecodeError):
            value = None  # the replica answers the malformed body with its own 400
        return value if isinstance(value, str) else None

    async def _target(self, request: dict[str, Any]) -> str | None:
        named = self._named(request)
        if named is not None:
            return named if named in self.handles else None
        first = next(iter(self.handles))
        if _ANY.match(request["path"]) and request["method"] != "POST":
            return first  # a job or file: any replica reads the shared stores
        for prefix, modality in _MODALITY:
            if request["path"].startswith(prefix):
                for model_id in self.handles:
                    if await self._modality_of(model_id) == modality:
                        return model_id
        return first  # its replica says what is missing, in omni's words

    async def _modality_of(self, model_id: str) -> str | None:
        if model_id not in self._modality:
            described = await self.handles[model_id].describe.remote()
            self._modality[model_id] = described.get("modality")
        return self._modality[model_id]

    async def _relay(self, handle: Any, request: dict[str, Any], send: Any) -> None:
        started = False
        try:
            async for message in handle.options(stream=True).forward.remote(request):
                started = started or message["type"] == "http.response.start"
                await send(message)
        except Exception as exc:  # noqa: BLE001 - a replica lost mid-request
            log.warning("replica failed during %s %s: %r", request["method"], request["path"], exc)
            if not started:
                await _error(
                    send,
                    503,
                    "the replica serving this request went away; retry",
                    "replica_unavailable",
                    retry_after=2,
                )
            else:  # headers are out: end the body so the client sees a short response
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- answers for every replica -------------------------------------------------------------

    async def _reports(self) -> dict[str, dict[str, Any]]:
        reports = await self.board.collect.remote(STALE_S)
        return {rid: r for rid, r in reports.items() if r["model"] in self.handles}

    async def _health(self, send: Any) -> None:
        reports = await self._reports()
        replicas: dict[str, dict[str, str]] = {m: {} for m in self.handles}
        for rid, report in reports.items():
            replicas[report["model"]][rid] = report["status"]
        models = {
            m: "ready" if any(s == "ready" for s in rs.values()) else "unavailable"
            for m, rs in replicas.items()
        }
        ready = all(s == "ready" for s in models.values())
        body = {"status": "ok" if ready else "unavailable", "models": models, "replicas": replicas}
        headers = [] if ready else [(b"retry-after", b"5")]
        await _json(send, 200 if ready else 503, body, headers)

    async def _metrics(self, send: Any) -> None:
        reports = await self._reports()
        text = merge_metrics({rid: (r["model"], r["metrics"]) for rid, r in reports.items()})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")],
            }
        )
        await send({"type": "http.response.body", "body": text.encode()})

    async def _models(self, request: dict[str, Any], send: Any) -> None:
        data, first_error = [], None
        for handle in self.handles.values():
            messages = [m async for m in handle.options(stream=True).forward.remote(request)]
            status = messages[0]["status"]
            payload = b"".join(m.get("body", b"") for m in messages[1:])
            if status != 200:
                first_error = first_error or messages
                continue
            data.extend(json.loads(payload)["data"])
        if first_error is not None and not data:  # 401 and the like: the replica's own answer
            for message in first_error:
                await send(message)
            return
        await _json(send, 200, {"object": "list", "data": data})


async def _json(
    send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _error(
    send: Any,
    status: int,
    message: str,
    code: str,
    *,
    param: str | None = None,
    retry_after: int | None = None,
) -> None:
    """An error in omni's OpenAI-style body (the replicas answer every other error)."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    headers = [(b"retry-after", str(retry_after).encode())] if retry_after else []
    await _json(send, status, body, headers)
