"""One real server for the serving suite: uvicorn on 127.0.0.1 (a free port), started once per
session with tiny random-weight checkpoints built by the model plugins' own builders.

A modality whose plugin does not provide both a builder and a registered pipeline is skipped
(never faked): the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

API_KEY = "test-key-123"
#: Small enough for 2 shared CPU cores; every model accepts it.
WAN_SIZE = {"width": 32, "height": 32, "num_frames": 5}
QWEN_SIZE = {"width": 32, "height": 32}


#: The omni model families the chat server adds when their plugin builds tiny checkpoints.
OMNI_MODELS = ("qwen25", "qwen3")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Checkpoints:
    """Tiny checkpoints by served id, and why a modality is missing."""

    paths: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def _build(
    ckpts: Checkpoints, model_id: str, root: Path, module: str, builder: str, **kwargs: Any
) -> None:
    """Build with the plugin's own builder; usable only if an installed pipeline claims it."""
    import importlib

    from omni_core.contract.errors import ModelNotFoundError
    from omni_core.contract.host import get_registry
    from omni_core.runtime.loading import find_pipeline

    try:
        build = getattr(importlib.import_module(module), builder)
    except (ImportError, AttributeError) as exc:
        ckpts.missing[model_id] = f"{module}.{builder} is not available: {exc}"
        return
    path = build(root / model_id, **kwargs)
    try:
        find_pipeline(get_registry(), path)
    except ModelNotFoundError as exc:
        ckpts.missing[model_id] = f"no installed pipeline serves it yet: {exc}"
        return
    ckpts.paths[model_id] = path


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    root = tmp_path_factory.mktemp("ckpts")
    ckpts = Checkpoints()
    # TI2V: text-to-video and image+text-to-video in one model (input_reference is exercised).
    _build(ckpts, "wan", root, "omni_wan.testing", "build_tiny_wan", variant="ti2v")
    _build(ckpts, "qwen", root, "omni_qwen.testing", "build_tiny_qwen_image", variant="t2i")
    _build(
        ckpts, "qwen-edit", root, "omni_qwen.testing", "build_tiny_qwen_image", variant="edit-plus"
    )
    _build(ckpts, "tts", root, "omni_tts.testing", "build_tiny_tts", family="vits")
    if not ckpts.paths:
        pytest.skip(f"no model plugin is ready: {ckpts.missing}")
    return ckpts


@dataclass
class LiveServer:
    """A running server and what it serves."""

    url: str
    app: Any
    server: Any
    thread: threading.Thread
    state_dir: Path
    checkpoints: Checkpoints
    api_key: str | None = API_KEY

    @property
    def state(self) -> Any:
        return self.app.state.omni

    def has(self, model_id: str) -> bool:
        return model_id in self.checkpoints.paths

    def need(self, model_id: str) -> None:
        if not self.has(model_id):
            pytest.skip(f"{model_id}: {self.checkpoints.missing.get(model_id)}")

    def http(self, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        kwargs.setdefault("timeout", 120)
        return httpx.Client(base_url=self.url, headers=headers, **kwargs)

    def openai(self) -> Any:
        """The official openai client for this server (its key, no retries)."""
        import openai

        key = self.api_key or "unused"
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def start_server(
    config: Any, checkpoints: Checkpoints, state_dir: Path, timeout: float = 300.0
) -> LiveServer:
    """uvicorn.Server on a thread (one process: imports are paid once), ready when /health is."""
    import uvicorn

    from omni_core.serving import create_app
    from omni_core.serving.connections import uvicorn_options

    app = create_app(config)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            lifespan="on",
            **uvicorn_options(config),  # the connection limits `omni serve` runs with
        )
    )
    thread = threading.Thread(target=server.run, name="omni-test-server", daemon=True)
    thread.start()
    url = f"http://{config.host}:{config.port}"
    live = LiveServer(
        url=url,
        app=app,
        server=server,
        thread=thread,
        state_dir=state_dir,
        checkpoints=checkpoints,
        api_key=config.api_key,
    )
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = httpx.get(f"{url}/health", timeout=5)
            if last.status_code == 200:
                return live
            if any(s == "failed" for s in last.json().get("models", {}).values()):
                break
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.2)
    live.stop()
    raise RuntimeError(f"server did not become healthy: {getattr(last, 'text', last)}")


def server_config(checkpoints: Checkpoints, state_dir: Path, **overrides: Any) -> Any:
    from omni_core.serving import ServerConfig

    fields: dict[str, Any] = {
        "models": [{"id": k, "path": str(v)} for k, v in checkpoints.paths.items()],
        "host": "127.0.0.1",
        "port": free_port(),
        "api_key": API_KEY,
        "state_dir": state_dir,
        "max_batch": 4,
        "max_queue": 8,  # with max_batch 4, 16 concurrent clients overflow it: 429s
        "max_upload_mb": 1.0,
        "max_steps": 50,
        "max_pixels": 64 * 64,
        "max_frames": 9,
        "warmup_request": {**WAN_SIZE, "num_inference_steps": 2},
    }
    fields.update(overrides)
    return ServerConfig(**fields)


@pytest.fixture(scope="session")
def live_server(
    checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    state_dir = tmp_path_factory.mktemp("state")
    live = start_server(server_config(checkpoints, state_dir), checkpoints, state_dir)
    yield live
    live.stop()


@pytest.fixture(scope="session")
def chat_server(
    acme_chat: Any, with_chat_plugin: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A server of chat models: the acme-chat test plugin's ``acme-text`` (a tiny Qwen2) and
    ``acme-omni`` (with a talker), and, when omni-qwen serves them, a tiny Qwen-Image beside
    them and tiny Qwen2.5-Omni / Qwen3-Omni (``qwen25``, ``qwen3``)."""
    root = tmp_path_factory.mktemp("chat-ckpts")
    ckpts = Checkpoints(
        paths={
            "acme-text": acme_chat.build_tiny_chat(root / "acme-text"),
            "acme-omni": acme_chat.build_tiny_chat(root / "acme-omni", talker=True, seed=1),
        }
    )
    state_dir = tmp_path_factory.mktemp("chat-state")
    with with_chat_plugin():  # the models load through it
        _build(ckpts, "qwen", root, "omni_qwen.testing", "build_tiny_qwen_image", variant="t2i")
        for family in OMNI_MODELS:  # the real omni families, where omni-qwen serves them
            _build(ckpts, family, root, "omni_qwen.testing", f"build_tiny_{family}_omni")
        config = server_config(ckpts, state_dir, allowed_url_hosts=["127.0.0.1"])
        live = start_server(config, ckpts, state_dir)
    yield live
    live.stop()


@pytest.fixture(scope="session")
def chat_client(chat_server: LiveServer) -> Any:
    return chat_server.openai()


@pytest.fixture()
def chat_http(chat_server: LiveServer) -> Iterator[httpx.Client]:
    with chat_server.http() as client:
        yield client


@pytest.fixture(scope="session")
def openai_client(live_server: LiveServer) -> Any:
    return live_server.openai()


@pytest.fixture()
def http(live_server: LiveServer) -> Iterator[httpx.Client]:
    with live_server.http() as client:
        yield client


def _wait_for(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


@pytest.fixture(scope="session")
def wait_for() -> Callable[..., Any]:
    """Poll ``predicate`` until it returns something truthy (or fail after ``timeout``)."""
    return _wait_for


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster (the machine's initdb/pg_ctl) on 127.0.0.1 for the
    session; each test takes its own database from :func:`fresh_database`."""
    from omni_core.testing.services import find_postgres, postgres_server

    where = find_postgres()
    if isinstance(where, str):
        pytest.skip(where)
    with postgres_server() as url:
        yield url


@pytest.fixture
def fresh_database(postgres_url: str, request: pytest.FixtureRequest) -> str:
    """A new empty database on the session's cluster; returns its URL."""
    import re
    from urllib.parse import urlsplit

    import pg8000.dbapi

    name = "t_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:50]
    port = urlsplit(postgres_url).port
    conn = pg8000.dbapi.connect(user="postgres", host="127.0.0.1", port=port)
    conn.autocommit = True
    conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
    conn.cursor().execute(f"CREATE DATABASE {name}")
    conn.close()
    return postgres_url.rsplit("/", 1)[0] + f"/{name}"


def make_job(store: Any, job_id: str, **fields: Any) -> None:
    """A queued video job in ``store`` (``fields`` override the defaults: owner, input...)."""
    values: dict[str, Any] = {
        "model": "m",
        "prompt": "p",
        "size": "32x32",
        "seconds": "1",
        "request": {"prompt": "p"},
        "input_path": None,
    }
    store.create(job_id=job_id, **{**values, **fields})
