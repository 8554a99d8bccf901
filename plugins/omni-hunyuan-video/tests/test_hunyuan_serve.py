"""The tiny HunyuanVideo-1.5 checkpoint through a real ``omni serve`` app on 127.0.0.1 and the
official ``openai`` client: a ``/v1/videos`` job renders the video ``Omni`` renders for the same
request (an H.264 MP4, compared where H.264 keeps the frames), OpenAI's ``seconds`` become 4k+1
frames at the request's rate, and bad requests get OpenAI-style 400s."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_core.testing import read_video

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

PROMPT = 'a shop sign that says "OPEN"'
FIELDS = {"num_inference_steps": 2, "seed": 5}


@pytest.fixture(scope="module")
def server(hunyuan_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn serving omni's app (what ``omni serve`` runs) on a thread."""
    from omni_core.testing import serve_on_thread

    with serve_on_thread(
        models=[{"id": "hunyuan-video", "path": str(hunyuan_checkpoint)}],
        state_dir=tmp_path_factory.mktemp("hunyuan-serve-state"),
    ) as url:
        yield url


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


def _finished(client: Any, **kwargs: Any) -> tuple[Any, bytes]:
    job = client.videos.create(model="hunyuan-video", prompt=PROMPT, **kwargs)
    deadline = time.monotonic() + 300
    while (done := client.videos.retrieve(job.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline, "the video job did not finish"
        time.sleep(0.2)
    assert done.status == "completed", done.error
    return done, client.videos.download_content(job.id).read()


def test_video_job_serves_what_omni_renders(client, hunyuan_model, blocks) -> None:
    done, data = _finished(client, size="48x32", extra_body={**FIELDS, "num_frames": 5})
    assert data[4:8] == b"ftyp" and done.progress == 100 and done.size == "48x32"
    got = read_video(data)
    want = hunyuan_model.generate(PROMPT, width=48, height=32, num_frames=5, **FIELDS).video
    other = hunyuan_model.generate(PROMPT, width=48, height=32, num_frames=5, seed=6).video
    assert got.shape == want.shape == (5, 32, 48, 3)
    near = np.abs(blocks(got) - blocks(want))
    far = np.abs(blocks(got) - blocks(other))
    assert near.mean() < 3 and near.max() < 12 and far.mean() > near.mean(), (near, far)


def test_seconds_become_frames_at_24_fps(client) -> None:
    import io

    import av

    _, data = _finished(client, size="32x32", seconds="4", extra_body={**FIELDS, "fps": 1})
    with av.open(io.BytesIO(data)) as container:
        assert container.streams.video[0].average_rate == 1
    assert read_video(data).shape[0] == 5  # 4 s at 1 fps: 4 * 1 + 1 frames


def test_bad_requests_are_openai_style_400s(client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.videos.create(model="hunyuan-video", prompt="x", size="40x32")
    assert "multiples of 16" in info.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:
        client.videos.create(model="hunyuan-video", prompt="x", size="32x32", extra_body={"fps": 0})
    assert info.value.body["param"] == "fps"  # type: ignore[index]
