"""The tiny LTX-2 checkpoint through a real ``omni serve`` app on 127.0.0.1 and the official
``openai`` client: a ``/v1/videos`` job renders the video and the sound ``Omni`` renders for
the same request (an H.264 MP4 with an AAC track, compared where the codecs keep them),
OpenAI's ``seconds`` become 2k+1 frames at the request's rate, and bad requests get
OpenAI-style 400s."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_core.testing import read_video, read_video_sound

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

PROMPT = "a red cat walks on the grass"
FIELDS = {"num_inference_steps": 2, "seed": 5}


@pytest.fixture(scope="module")
def server(
    ltx_checkpoint: Path, ltx_i2v_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """uvicorn serving omni's app (what ``omni serve`` runs) on a thread."""
    from omni_core.testing import serve_on_thread

    with serve_on_thread(
        models=[
            {"id": "ltx-2", "path": str(ltx_checkpoint)},
            {"id": "ltx-2-i2v", "path": str(ltx_i2v_checkpoint)},
        ],
        state_dir=tmp_path_factory.mktemp("ltx-serve-state"),
    ) as url:
        yield url


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


def _finished(client: Any, **kwargs: Any) -> tuple[Any, bytes]:
    job = client.videos.create(model="ltx-2", prompt=PROMPT, **kwargs)
    deadline = time.monotonic() + 300
    while (done := client.videos.retrieve(job.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline, "the video job did not finish"
        time.sleep(0.2)
    assert done.status == "completed", done.error
    return done, client.videos.download_content(job.id).read()


def test_video_job_serves_the_video_and_sound_omni_renders(client, ltx_model, blocks) -> None:
    extras = {"fps": 2}  # 5 frames at 2 fps: 2.5 s of sound
    body = {**FIELDS, "num_frames": 5, **extras}  # extras are top-level fields
    done, data = _finished(client, size="64x32", extra_body=body)
    assert data[4:8] == b"ftyp" and done.progress == 100 and done.size == "64x32"
    want = ltx_model.generate(PROMPT, width=64, height=32, num_frames=5, extras=extras, **FIELDS)
    other = ltx_model.generate(PROMPT, width=64, height=32, num_frames=5, extras=extras, seed=6)
    got = read_video(data)
    assert got.shape == want.video.shape == (5, 32, 64, 3)
    near = np.abs(blocks(got) - blocks(want.video))
    far = np.abs(blocks(got) - blocks(other.video))
    # The tiny VAE's 2x factor makes saturated, per-pixel frames that H.264 keeps less well
    # than a real model's: another seed is still several times farther.
    assert near.mean() < 10 and far.mean() > 4 * near.mean(), (near.mean(), far.mean())
    sound, rate = read_video_sound(data)  # type: ignore[misc]
    assert rate == want.sample_rate and sound.shape[1] == 2 and len(sound) >= len(want.audio)
    n = len(want.audio)
    for channel in (0, 1):  # AAC keeps the waveform: the same sound, not another seed's
        near_rms = np.sqrt(np.mean((sound[:n, channel] - want.audio[:, channel]) ** 2))
        far_rms = np.sqrt(np.mean((sound[:n, channel] - other.audio[:n, channel]) ** 2))
        assert np.corrcoef(sound[:n, channel], want.audio[:, channel])[0, 1] > 0.95
        assert far_rms > 3 * near_rms


def test_image_to_video_job_animates_the_input_reference(server, ltx_i2v_model, blocks) -> None:
    """Multipart with the image as ``input_reference`` (raw HTTP, as a browser form sends it)."""
    import io

    import httpx
    from PIL import Image

    image = Image.fromarray((np.random.RandomState(0).rand(32, 64, 3) * 255).astype("uint8"))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    fields = {"model": "ltx-2-i2v", "prompt": PROMPT, "size": "64x32", "num_frames": "5"}
    fields |= {"num_inference_steps": "2", "seed": "4"}
    files = {"input_reference": ("cat.png", buf.getvalue(), "image/png")}
    with httpx.Client(base_url=server, timeout=300) as http:
        response = http.post("/v1/videos", data=fields, files=files)
        assert response.status_code == 200, response.text
        job = response.json()
        deadline = time.monotonic() + 300
        while (done := http.get(f"/v1/videos/{job['id']}").json())["status"] != "completed":
            assert done["status"] != "failed" and time.monotonic() < deadline, done
            time.sleep(0.2)
        data = http.get(f"/v1/videos/{job['id']}/content").content
    want = ltx_i2v_model.generate(
        PROMPT, images=[image], width=64, height=32, num_frames=5, num_inference_steps=2, seed=4
    )
    video = read_video(data)
    assert video.shape == want.video.shape == (5, 32, 64, 3)
    assert np.abs(blocks(video) - blocks(want.video)).mean() < 10  # H.264 (see above)
    assert read_video_sound(data) is not None


def test_seconds_become_frames_at_the_requests_rate(client) -> None:
    import io

    import av

    body = {**FIELDS, "fps": 2}
    _, data = _finished(client, size="32x32", seconds="4", extra_body=body)
    with av.open(io.BytesIO(data)) as container:
        assert container.streams.video[0].average_rate == 2
        assert container.streams.audio[0].codec_context.name == "aac"
    assert read_video(data).shape[0] == 9  # 4 s at 2 fps: 4 * 2 + 1 frames


def test_bad_requests_are_openai_style_400s(client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.videos.create(model="ltx-2", prompt="x", size="40x32")
    assert "multiples of 32" in info.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:
        client.videos.create(model="ltx-2", prompt="x", size="32x32", extra_body={"fps": 0})
    assert info.value.body["param"] == "fps"  # type: ignore[index]
