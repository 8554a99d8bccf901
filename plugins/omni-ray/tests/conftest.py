"""omni-ray's tests run in their own environment (ray[serve] is large): ``nox -s ray`` or
``tox -c plugins/omni-ray/tox.ini``. In an environment without ray each test module is skipped,
saying so.

The deployment tests start real things: a local Ray cluster (started by ``omni deploy ray``
itself, on 127.0.0.1), real replicas of a tiny Wan checkpoint built in-process in the real
layout, and a real PostgreSQL server (the machine's initdb/pg_ctl) for the shared-store run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_wan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_wan.testing import build_tiny_wan

    return build_tiny_wan(tmp_path_factory.mktemp("ckpt") / "wan", variant="ti2v")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    from omni_core.testing import find_postgres, postgres_server

    where = find_postgres()
    if isinstance(where, str):
        pytest.skip(where)
    with postgres_server() as url:
        yield url
