"""Session fixtures: tiny Qwen-Image checkpoints (built once) and pipelines loaded once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def qwen_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from omni_qwen.testing import build_tiny_qwen_image

    root = tmp_path_factory.mktemp("qwen")
    return {v: build_tiny_qwen_image(root / v, v) for v in ("t2i", "edit", "edit-plus")}


@pytest.fixture(scope="session")
def qwen_pipelines(qwen_checkpoints: dict[str, Path]) -> dict[str, Any]:
    """Our pipelines, float32 on CPU, keyed by variant."""
    import torch

    from omni_core.testing import pipeline_options
    from omni_qwen import pipelines

    torch.set_num_threads(2)
    options = pipeline_options(dtype=torch.float32)
    classes = {
        "t2i": pipelines.QwenImagePipeline,
        "edit": pipelines.QwenImageEditPipeline,
        "edit-plus": pipelines.QwenImageEditPlusPipeline,
    }
    return {v: classes[v].from_pretrained(qwen_checkpoints[v], options) for v in classes}


@pytest.fixture(scope="session")
def qwen_references(qwen_checkpoints: dict[str, Path]) -> dict[str, Any]:
    """diffusers' own pipelines on the same checkpoints (lazily, once each)."""
    import diffusers

    from omni_qwen.compat import load_vl_processor

    cache: dict[str, Any] = {}

    class Lazy(dict):
        def __missing__(self, variant: str) -> Any:
            path = qwen_checkpoints[variant]
            cls = {
                "t2i": diffusers.QwenImagePipeline,
                "edit": diffusers.QwenImageEditPipeline,
                "edit-plus": diffusers.QwenImageEditPlusPipeline,
            }[variant]
            extra = {} if variant == "t2i" else {"processor": load_vl_processor(path / "processor")}
            pipe = cls.from_pretrained(path, **extra)
            pipe.set_progress_bar_config(disable=True)
            self[variant] = pipe
            return pipe

    return Lazy(cache)


@pytest.fixture(scope="session")
def qwen_images() -> list[Any]:
    """Three small deterministic RGB test images of different aspect ratios."""
    import numpy as np
    from PIL import Image

    shapes = [(80, 120), (90, 60), (64, 64)]
    return [
        Image.fromarray((np.random.RandomState(i).rand(h, w, 3) * 255).astype(np.uint8))
        for i, (h, w) in enumerate(shapes)
    ]


@pytest.fixture(scope="session")
def qwen3_tts_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random Qwen3-TTS checkpoints (official layout): the three kinds + a 0.6B-style one."""
    from omni_qwen.testing import build_tiny_qwen3_tts

    root = tmp_path_factory.mktemp("qwen3-tts-model")
    specs = {
        "custom_voice": ("custom_voice", "1b7"),
        "voice_design": ("voice_design", "1b7"),
        "base": ("base", "1b7"),
    }
    specs["custom_voice_0b6"] = ("custom_voice", "0b6")
    return {
        name: build_tiny_qwen3_tts(root / name, kind, size=size)
        for name, (kind, size) in specs.items()
    }


@pytest.fixture(scope="session")
def qwen3_tts(qwen3_tts_checkpoints: dict[str, Path]) -> dict[str, Any]:
    """The tiny checkpoints loaded with omni's Qwen3TTSModel (float32, CPU)."""
    import torch

    from omni_qwen.tts import Qwen3TTSModel

    torch.set_num_threads(2)
    return {
        name: Qwen3TTSModel.from_pretrained(path) for name, path in qwen3_tts_checkpoints.items()
    }


@pytest.fixture
def emulate_capture() -> Any:
    """``emulate_capture(runner)`` makes an ``omni_core.runtime.GraphRunner`` take its capture path
    on CPU (the test kit's ``emulate_graph_capture``)."""
    from omni_core.testing import emulate_graph_capture

    return emulate_graph_capture
