"""Fixtures of the repository-level tests: the third-party test plugins, importable by their
module names as installed plugins are (their specs name ``acme_chat:AcmeChatPipeline``), and
the tiny checkpoint of every first-party pipeline (``tiny_first_party``)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def plugin_module(name: str) -> ModuleType:
    """``tests/<name>.py`` imported once as the top-level module ``name``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def acme_chat() -> ModuleType:
    return plugin_module("acme_chat")


@pytest.fixture(scope="session")
def acme_ar_tts() -> ModuleType:
    return plugin_module("acme_ar_tts")


@pytest.fixture(scope="session")
def acme_dialogue() -> ModuleType:
    return plugin_module("acme_dialogue")


@pytest.fixture(scope="session")
def acme_warmup() -> ModuleType:
    return plugin_module("acme_warmup")


@pytest.fixture(scope="session")
def tiny_first_party(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Any], str]:
    """``tiny_first_party(tiny)``: the path of a :class:`tiny_first_party.Tiny` checkpoint,
    built once per session (the table of every first-party pipeline's tiny checkpoints is
    ``plugin_module("tiny_first_party").TINY``)."""
    root = tmp_path_factory.mktemp("tiny-first-party")
    built: dict[str, str] = {}

    def path(tiny: Any) -> str:
        if tiny.label not in built:
            built[tiny.label] = tiny.build(root)
        return built[tiny.label]

    return path


def _cancel_running(pipeline: Any, request: Any) -> None:
    from omni_core.contract.errors import RequestCancelledError
    from omni_core.runtime.engine import Engine
    from omni_core.runtime.jobs import Job

    engine = Engine(pipeline, name="cancel", max_batch=4).start()
    try:
        started = threading.Event()
        job = engine.submit(Job(request, on_chunk=lambda piece: started.set()))
        assert started.wait(30)
        engine.cancel(job, "stop")
        with pytest.raises(RequestCancelledError):
            job.future.result(30)
    finally:
        engine.stop()
    assert pipeline.shared_runtime().open_streams == 0


@pytest.fixture(scope="session")
def cancel_running() -> Callable[[Any, Any], None]:
    """``cancel_running(pipeline, request)``: an engine runs the validated ``request``; once its
    first piece is out the job is cancelled; it must end cancelled, its runtime empty."""
    return _cancel_running


@pytest.fixture(scope="session")
def with_chat_plugin(acme_chat: ModuleType) -> Callable[[], AbstractContextManager[object]]:
    """``with with_chat_plugin():`` the process-wide plugin host is the installed plugins plus
    acme-chat (models load through it); the previous host comes back after the block."""

    @contextlib.contextmanager
    def swapped() -> Iterator[object]:
        from omni_core.contract.host import PluginHost, set_host

        host = PluginHost()
        host.register_object("omni-acme-chat", acme_chat)
        previous = set_host(host)
        try:
            yield host
        finally:
            set_host(previous)

    return swapped


@pytest.fixture(scope="module")
def chat_host(with_chat_plugin: Callable[[], AbstractContextManager[object]]) -> Iterator[object]:
    """acme-chat (and the installed plugins) for a whole test module."""
    with with_chat_plugin() as host:
        yield host
