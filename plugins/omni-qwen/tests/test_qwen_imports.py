"""omni-qwen keeps omni-core's own rules: omni-core through its faces only (its tests and
``testing``: the faces and the test kit), no import cycle among its modules (the Qwen3-TTS
talker and code predictor share ``tts/blocks.py`` instead of importing each other), and the tiny
builders in ``testing`` reached from tests and the benchmark workloads only: no serving module
imports a builder (the Qwen2.5-Omni system prompt is the pipeline's, in ``omni/qwen25_prompt``).
"""

from __future__ import annotations

from pathlib import Path

from omni_core.testing import assert_package_imports_sound, import_graph

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "omni_qwen"


def test_qwen_package_imports_are_sound() -> None:
    assert_package_imports_sound(PACKAGE, tests=ROOT / "tests", testing_users=("bench",))


def test_qwen_import_graph_sees_deferred_imports() -> None:
    """The check is not vacuous: imports inside functions count (the benchmark's builder, the
    Qwen-Omni pipeline's prompt module) and so do the ones between the TTS parts."""
    graph = import_graph(PACKAGE)
    assert "omni_qwen.testing" in graph["omni_qwen.bench"]
    assert "omni_qwen.omni.qwen25_prompt" in graph["omni_qwen.omni.qwen25_pipeline"]
    assert "omni_qwen.tts.blocks" in graph["omni_qwen.tts.talker"]
    assert "omni_qwen.tts.talker" not in graph["omni_qwen.tts.code_predictor"]
