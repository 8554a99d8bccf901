"""The warm-up is the pipeline's to declare (``Pipeline.warmup_fields``): a real server
(127.0.0.1) serving the third-party acme painter (``tests/acme_warmup.py``), which needs three
steps and a palette extra, sends exactly the request it declares, validated like any other.

A pipeline whose declared warm-up its own ``validate`` refuses is reported failed with the
pipeline's reason (``/health``, the 503 of a request to it, one line of the log, no traceback),
and the server's other models still serve.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Checkpoints, LiveServer, server_config, start_server

REFUSED = (
    "the warm-up request was refused: num_inference_steps=1: the acme painter needs at least 3 "
    "steps; set one with --warmup-request JSON or pass --no-warmup"
)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def painter_server(
    acme_warmup: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, list[logging.LogRecord]]]:
    from omni_core.contract.host import PluginHost, set_host

    root = tmp_path_factory.mktemp("warmup-contract")
    host = PluginHost(autoload=False)
    host.register_object("omni-acme-warmup", acme_warmup.AcmeWarmupPlugin())
    previous = set_host(host)
    records = _Records()
    logger = logging.getLogger("omni.serving")
    logger.addHandler(records)
    try:
        ckpts = Checkpoints(
            paths={
                "acme": acme_warmup.build_tiny_checkpoint(root / "acme"),
                "acme-broken": acme_warmup.build_tiny_checkpoint(
                    root / "acme-broken", warmup="one step"
                ),
            }
        )
        state_dir = root / "state"
        # No warmup_request: what the models declare is the whole warm-up.
        config = server_config(ckpts, state_dir, warmup_request={})
        live = start_server(config, ckpts, state_dir, allow_failed=True)
    finally:
        logger.removeHandler(records)
        set_host(previous)
    yield live, records.records
    live.stop()


def test_the_server_sends_the_warmup_the_pipeline_declares(
    painter_server: tuple[LiveServer, list[logging.LogRecord]],
) -> None:
    live, _ = painter_server
    (warmup,) = live.state.models["acme"].pipeline.prepared  # nothing else reached it yet
    assert warmup.request_id == "warmup"
    assert warmup.prompt == "acme warm-up"
    assert warmup.num_inference_steps == 3
    assert warmup.extras == {"palette": "warm"}
    image = live.openai().images.generate(model="acme", prompt="a wall", size="16x16")
    assert image.data and len(live.state.models["acme"].pipeline.prepared) == 2


def test_a_refused_warmup_is_reported_with_the_pipelines_reason(
    painter_server: tuple[LiveServer, list[logging.LogRecord]],
) -> None:
    import openai

    live, records = painter_server
    with live.http() as http:
        health = http.get("/health")
    assert health.status_code == 503
    assert health.json()["models"] == {"acme": "ready", "acme-broken": "failed"}
    assert health.json()["errors"] == {"acme-broken": REFUSED}
    with pytest.raises(openai.InternalServerError) as info:  # 503: the model is unavailable
        live.openai().images.generate(model="acme-broken", prompt="a wall", size="16x16")
    assert info.value.status_code == 503
    assert info.value.body["message"] == f"model 'acme-broken' failed to load: {REFUSED}"  # type: ignore[index]
    failed = [r for r in records if "acme-broken" in r.getMessage()]
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in failed] == [
        (logging.ERROR, f"model acme-broken failed to load: {REFUSED}", None)
    ]
