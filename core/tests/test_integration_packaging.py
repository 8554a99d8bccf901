"""Packaging: plugins declare what their code paths import."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _requirements(pyproject: Path) -> set[str]:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps}


def test_integration_omni_wan_declares_ftfy() -> None:
    # omni_wan cleans prompts with diffusers' Wan prompt_clean, which uses ftfy when installed.
    source = (ROOT / "plugins/omni-wan/src/omni_wan/pipeline.py").read_text()
    assert "prompt_clean" in source
    assert "ftfy" in _requirements(ROOT / "plugins/omni-wan/pyproject.toml")
    pytest.importorskip("ftfy")
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    assert prompt_clean("  a  cat &amp; a dog ") == "a cat & a dog"


def test_integration_omni_layers_never_import_torchao() -> None:
    """omni imports torchao only when a torchao quantizer is applied.

    (transformers' PreTrainedModel and diffusers' ModelMixin import it themselves whenever it is
    installed; that cost is theirs, so this checks omni's own layers in a cold process.)
    """
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from omni_core.contract.host import get_registry\n"
        "from omni_core.contract.registry import load_object\n"
        "import omni_core.diffusion.acceleration, omni_core.api, omni_core.serving\n"
        "from omni_core.serving import ServerConfig, create_app\n"
        "create_app(ServerConfig(models=[{'id': 'm', 'path': 'm'}], warmup=False))\n"
        "for spec in get_registry().quantizers.values():\n"
        "    load_object(spec.implementation)\n"
        "    assert spec.availability is None or load_object(spec.availability)() is not None\n"
        "print('torchao' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"
