"""The tiny Z-Image checkpoint through a real ``omni serve`` app on 127.0.0.1 and the official
``openai`` client: ``images.generate`` gives the images ``Omni`` gives for the same request
(with and without CFG, two at once), and bad requests get OpenAI-style 400s."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

STEPS = {"num_inference_steps": 2, "max_sequence_length": 64}


@pytest.fixture(scope="module")
def server(zimage_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn serving omni's app (what ``omni serve`` runs) on a thread."""
    from omni_core.testing import serve_on_thread

    with serve_on_thread(
        models=[{"id": "z-image-turbo", "path": str(zimage_checkpoint)}],
        state_dir=tmp_path_factory.mktemp("zimage-serve-state"),
    ) as url:
        yield url


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


def _pixels(b64: str | None) -> np.ndarray:
    from PIL import Image

    assert b64 is not None
    image = Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")
    return np.asarray(image).astype(int)


@pytest.mark.parametrize(
    "extra",
    [{"seed": 7}, {"seed": 3, "guidance_scale": 4.0, "negative_prompt": "blurry"}],
    ids=["turbo", "cfg"],
)
def test_images_generate_serves_what_omni_generates(client, zimage_model, extra) -> None:
    body = {**STEPS, **extra}
    answer = client.images.generate(
        model="z-image-turbo", prompt="a lighthouse at dusk", size="96x64", n=2, extra_body=body
    )
    assert len(answer.data) == 2
    expected = zimage_model.generate(
        "a lighthouse at dusk", width=96, height=64, num_outputs=2, **body
    )
    for item, image in zip(answer.data, expected.images, strict=True):
        want = np.asarray(image).astype(int)
        got = _pixels(item.b64_json)
        assert got.shape == want.shape and want.std() > 5
        assert np.abs(got - want).max() <= 1


def test_bad_requests_are_openai_style_400s(client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.images.generate(model="z-image-turbo", prompt="x", size="100x64")
    assert "multiples of 16" in info.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:
        client.images.generate(
            model="z-image-turbo", prompt="x", size="64x64", extra_body={"cfg_truncation": 3}
        )
    assert info.value.body["param"] == "cfg_truncation"  # type: ignore[index]
