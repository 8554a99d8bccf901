"""The published OpenAPI document is the truth: a schemathesis run against a real server of the
tiny models finds no body the document allows that the server refuses (positive-data
acceptance), no answer of a content type the document does not list, and no ``Allow`` that
disagrees with the document's methods.

The run is the ``schemathesis`` CLI (as anyone would run it) with :mod:`schema_hooks`: real PNGs
where the document asks for an image. Its server has small limits (``--max-steps 2``,
``--max-pixels 1024``, ``--max-frames 5``), so the document offers only cheap requests and every
valid body really generates. The longer run (more examples, and the stateful phase) is::

    OMNI_SCHEMA_LONG=1 HF_HUB_OFFLINE=1 .venv/bin/pytest -q -m slow \\
        tests/serving/test_serve_openapi_conformance.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Checkpoints, LiveServer, server_config, start_server

pytest.importorskip("schemathesis")

HERE = Path(__file__).parent
#: The checks the document is held to (ST202, ST105/ST106, ST205/ST206 and 5xx).
CHECKS = (
    "positive_data_acceptance",
    "content_type_conformance",
    "allow_header_conformance",
    "unsupported_method",
    "not_a_server_error",
)


@pytest.fixture(scope="module")
def cheap_server(
    checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """The tiny models behind limits that make every request the document allows cheap."""
    state_dir = tmp_path_factory.mktemp("conformance-state")
    config = server_config(
        checkpoints,
        state_dir,
        max_steps=2,
        max_pixels=32 * 32,
        max_frames=5,
        max_outputs=2,
        warmup_request={"width": 32, "height": 32, "num_frames": 5, "num_inference_steps": 2},
    )
    live = start_server(config, checkpoints, state_dir)
    yield live
    live.stop()


def schemathesis_run(live: LiveServer, examples: int, phases: str, timeout: float) -> str:
    """``schemathesis run`` against ``live`` with the checks above; its output (it must pass)."""
    cli = Path(sys.executable).with_name("schemathesis")
    command = [
        str(cli),
        "run",
        f"{live.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {live.api_key}",
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(examples),
        "--phases",
        phases,
        "--seed",
        "1",
        "--workers",
        "1",
        "--request-timeout",
        "120",
        "--no-color",
    ]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "schema_hooks",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-20_000:]
    return output


def _operations(live: LiveServer) -> int:
    """The document's operation count; each has its own operation id (a client generator
    names its methods by them: a shared id drops one method)."""
    document = httpx.get(f"{live.url}/openapi.json", timeout=60).json()
    methods = ("get", "post", "delete")
    ops = [op for item in document["paths"].values() for m, op in item.items() if m in methods]
    ids = [op["operationId"] for op in ops]
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)
    return len(ops)


def _assert_every_operation(output: str, live: LiveServer) -> None:
    count = _operations(live)
    assert re.search(rf"Selected: {count}/{count}", output), output[-5000:]
    assert re.search(rf"Tested: {count}\b", output), output[-5000:]
    assert " passed" in output and "failures" not in output.split("SUMMARY")[-1], output[-5000:]


def test_serve_openapi_document_is_what_the_server_takes(cheap_server: LiveServer) -> None:
    """A few dozen cases per operation (the coverage phase's boundaries, then fuzzing)."""
    output = schemathesis_run(cheap_server, examples=10, phases="coverage,fuzzing", timeout=540)
    _assert_every_operation(output, cheap_server)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("OMNI_SCHEMA_LONG") != "1",
    reason="the long schemathesis run is asked for with OMNI_SCHEMA_LONG=1 (module docstring)",
)
def test_serve_openapi_document_long_run(cheap_server: LiveServer) -> None:
    examples = int(os.environ.get("OMNI_SCHEMA_EXAMPLES", "100"))
    output = schemathesis_run(
        cheap_server, examples=examples, phases="coverage,fuzzing,stateful", timeout=3600
    )
    _assert_every_operation(output, cheap_server)


def _body(live: LiveServer, path: str, media: str = "application/json") -> dict[str, Any]:
    document = httpx.get(f"{live.url}/openapi.json", timeout=60).json()
    return document["paths"][path]["post"]["requestBody"]["content"][media]["schema"]


def test_serve_openapi_bodies_follow_each_model(cheap_server: LiveServer) -> None:
    """What the document says of each model is what it takes: sizes and frames under the
    limits, each model's extras, ignored foreign fields typed, nothing else accepted."""
    cheap_server.need("qwen")
    cheap_server.need("wan")
    image = _body(cheap_server, "/v1/images/generations")
    assert image["title"] == "qwen"  # qwen-edit needs an input image: no generations body
    assert image["additionalProperties"] is False
    props = image["properties"]
    assert props["model"]["enum"] == ["qwen"]
    assert props["size"]["enum"] == ["32x32"]  # --max-pixels 1024, multiples of 32
    assert "size" in image["required"]  # its default size is over the limit
    assert props["num_inference_steps"]["maximum"] == 2
    assert props["n"]["maximum"] == 2
    assert "max_sequence_length" in props  # Qwen-Image's extra
    assert props["user"]["type"] == "string" and "ignored" in props["user"]["description"]
    video = _body(cheap_server, "/v1/videos")
    assert video["properties"]["num_frames"] == {"type": "integer", "minimum": 1, "maximum": 5}
    assert {"fps", "flow_shift"} <= set(video["properties"])  # Wan's extras
    assert video["properties"]["flow_shift"]["minimum"] == 0.001
    form = _body(cheap_server, "/v1/videos", "multipart/form-data")
    assert form["properties"]["input_reference"]["format"] == "binary"
