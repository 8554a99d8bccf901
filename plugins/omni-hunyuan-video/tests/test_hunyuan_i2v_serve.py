"""HunyuanVideo-1.5 image to video through a real ``omni serve`` app on 127.0.0.1: a
``/v1/videos`` job with the image as ``input_reference`` (multipart, raw HTTP) renders the
image's size bucket, the video ``Omni`` renders for the same request."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from omni_core.testing import read_video

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def server(hunyuan_i2v_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn serving omni's app (what ``omni serve`` runs) on a thread."""
    from omni_core.testing import serve_on_thread

    with serve_on_thread(
        models=[{"id": "hunyuan-i2v", "path": str(hunyuan_i2v_checkpoint)}],
        state_dir=tmp_path_factory.mktemp("hunyuan-i2v-serve-state"),
    ) as url:
        yield url


def _png(seed: int) -> tuple[bytes, object]:
    from PIL import Image

    pixels = np.random.RandomState(seed).rand(40, 60, 3) * 255
    image = Image.fromarray(pixels.astype("uint8"))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue(), image


def test_video_job_animates_the_input_reference(server, hunyuan_i2v_model, blocks) -> None:
    data, image = _png(0)
    fields = {"model": "hunyuan-i2v", "prompt": "a cat", "num_frames": "5"}
    fields |= {"num_inference_steps": "2", "seed": "4"}
    with httpx.Client(base_url=server, timeout=300) as http:
        response = http.post(
            "/v1/videos", data=fields, files={"input_reference": ("cat.png", data, "image/png")}
        )
        assert response.status_code == 200, response.text
        job = response.json()
        deadline = time.monotonic() + 300
        while (done := http.get(f"/v1/videos/{job['id']}").json())["status"] != "completed":
            assert done["status"] != "failed" and time.monotonic() < deadline, done
            time.sleep(0.2)
        video = read_video(http.get(f"/v1/videos/{job['id']}/content").content)
    want = hunyuan_i2v_model.generate(
        "a cat", images=[image], num_frames=5, num_inference_steps=2, seed=4
    ).video
    assert video.shape == want.shape == (5, 48, 64, 3)  # the image's bucket, not its 60x40
    assert np.abs(blocks(video) - blocks(want)).mean() < 3
