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

    from omni_core.pipelines.base import PipelineOptions
    from omni_core.platforms import current_platform
    from omni_qwen import pipelines

    torch.set_num_threads(2)
    options = PipelineOptions(
        device=torch.device("cpu"), dtype=torch.float32, platform=current_platform()
    )
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
