"""The tiny FLUX checkpoints through a real ``omni serve`` app on 127.0.0.1 and the official
``openai`` client: ``images.generate`` (FLUX.1-dev and -schnell, FLUX.2-dev and -klein) and
``images.edit`` (FLUX.1-Kontext) give the images ``Omni`` gives for the same request, and bad
requests get OpenAI-style 400s."""

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

T5 = {"max_sequence_length": 32}


@pytest.fixture(scope="module")
def server(
    flux_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """uvicorn serving omni's app (what ``omni serve`` runs) on a thread."""
    from omni_core.testing import serve_on_thread

    with serve_on_thread(
        models=[
            {"id": "flux-dev", "path": str(flux_checkpoints["dev"])},
            {"id": "flux-kontext", "path": str(flux_checkpoints["kontext"])},
            {"id": "flux-schnell", "path": str(flux_checkpoints["schnell"])},
            {"id": "flux2", "path": str(flux_checkpoints["flux2"])},
            {"id": "flux2-klein", "path": str(flux_checkpoints["flux2-klein"])},
        ],
        state_dir=tmp_path_factory.mktemp("flux-serve-state"),
    ) as url:
        yield url


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


def _image(b64: str | None) -> Any:
    from PIL import Image

    assert b64 is not None
    return Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")


def _same(a: Any, b: Any) -> None:
    pa, pb = np.asarray(a).astype(int), np.asarray(b).astype(int)
    assert pa.shape == pb.shape and pa.std() > 5
    assert np.abs(pa - pb).max() <= 1


def test_images_generate_serves_what_omni_generates(client: Any, flux_models: dict) -> None:
    extra = {"seed": 7, "num_inference_steps": 2, "guidance_scale": 4.5, **T5}
    answer = client.images.generate(
        model="flux-dev", prompt="a lighthouse at dusk", size="96x64", n=2, extra_body=extra
    )
    assert len(answer.data) == 2
    expected = flux_models["dev"].generate(
        "a lighthouse at dusk", width=96, height=64, num_outputs=2, **extra
    )
    for item, image in zip(answer.data, expected.images, strict=True):
        _same(_image(item.b64_json), image)


@pytest.mark.parametrize(
    ("model", "variant", "extra"),
    [
        ("flux-schnell", "schnell", {}),
        ("flux2", "flux2", {"guidance_scale": 4.0}),
        ("flux2-klein", "flux2-klein", {"guidance_scale": 3.0, "negative_prompt": "blurry"}),
    ],
)
def test_every_text_to_image_pipeline_is_served(
    client: Any, flux_models: dict, model: str, variant: str, extra: dict
) -> None:
    body = {"seed": 4, "num_inference_steps": 2, **extra, **T5}
    answer = client.images.generate(model=model, prompt="a cat", size="64x64", extra_body=body)
    expected = flux_models[variant].generate("a cat", width=64, height=64, **body)
    assert expected.info["pipeline"] == {"flux-schnell": "flux"}.get(model, model)
    _same(_image(answer.data[0].b64_json), expected.images[0])


def test_true_cfg_and_the_t5_prompt_reach_the_pipeline(client: Any, flux_models: dict) -> None:
    extra = {
        "seed": 3,
        "num_inference_steps": 2,
        "negative_prompt": "blurry",
        "true_cfg_scale": 3.0,
        "prompt_2": "a red lighthouse",
        **T5,
    }
    answer = client.images.generate(
        model="flux-dev", prompt="a cat", size="64x64", extra_body=extra
    )
    expected = flux_models["dev"].generate("a cat", width=64, height=64, **extra)
    assert expected.info["cfg"] is True
    _same(_image(answer.data[0].b64_json), expected.images[0])


def test_images_edit_serves_kontext(client: Any, flux_models: dict, flux_image: Any) -> None:
    png = io.BytesIO()
    flux_image.save(png, format="PNG")
    extra = {"seed": 2, "num_inference_steps": 2, "auto_resize": False, **T5}
    answer = client.images.edit(
        model="flux-kontext",
        image=("in.png", png.getvalue(), "image/png"),
        prompt="make it blue",
        size="64x64",
        extra_body=extra,
    )
    expected = flux_models["kontext"].generate(
        "make it blue", images=[flux_image], width=64, height=64, **extra
    )
    _same(_image(answer.data[0].b64_json), expected.images[0])


def test_bad_requests_are_openai_style_400s(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.images.generate(model="flux-dev", prompt="x", size="100x64")
    assert "multiples of 16" in info.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:
        client.images.generate(
            model="flux-dev", prompt="x", size="64x64", extra_body={"true_cfg_scale": 4.0}
        )
    assert info.value.body["param"] == "true_cfg_scale"  # type: ignore[index]
