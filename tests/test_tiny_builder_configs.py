"""The tiny checkpoints' configs are clean (issue 34, point 5): building every first-party tiny
checkpoint and loading it as ``omni serve`` does logs no transformers warning that a special
token id lies outside its vocabulary.

In a fresh process: transformers warns once per message and process, so in this one an earlier
test may already have used the warning up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import json, logging, sys
from pathlib import Path

sys.path.insert(0, sys.argv[2])
import tiny_first_party as tiny_table

seen = []


class Vocabulary(logging.Handler):
    def emit(self, record):
        if "within the vocabulary" in record.getMessage():
            seen.append(f"{current}: {record.getMessage()}")


logging.getLogger("transformers").addHandler(Vocabulary())
from omni_core import Omni

root = Path(sys.argv[1])
for pipeline, tinies in tiny_table.TINY.items():
    if tiny_table.missing(pipeline):
        continue
    for tiny in tinies:
        current = f"{tiny.label} (building)"
        path = tiny.build(root)
        current = f"{tiny.label} (loading)"
        Omni(path, device="cpu", dtype="float32").close()
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_tiny_builders_configs_keep_token_ids_inside_the_vocabulary(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMNI_PLATFORM": ""}
    here = Path(__file__).resolve().parent
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), str(here)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []
