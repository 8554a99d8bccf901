"""``GET /v1/models/{id}/knobs``: each served model's own fields, read from the contract (its
extras schema, warm-up defaults, voices, routes), behind the API key like ``/v1/models``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from .conftest import WAN_SIZE, LiveServer


def test_a_video_model_publishes_its_extras_and_working_defaults(
    live_server: LiveServer, http: httpx.Client
) -> None:
    live_server.need("wan")
    knobs = http.get("/v1/models/wan/knobs").json()
    assert knobs["object"] == "model.knobs" and knobs["modality"] == "video"
    assert list(knobs["routes"]) == ["/v1/videos"]
    assert "num_frames" in knobs["routes"]["/v1/videos"]
    pipeline = live_server.state.models["wan"].pipeline
    assert set(knobs["extras"]["properties"]) == set(pipeline.extras_model.model_fields)
    # The warm-up request after --warmup-request: what runs on this server.
    assert knobs["defaults"]["size"] == f"{WAN_SIZE['width']}x{WAN_SIZE['height']}"
    assert knobs["defaults"]["num_frames"] == WAN_SIZE["num_frames"]
    assert knobs["defaults"]["fps"] > 0
    assert knobs["limits"]["max_frames"] == live_server.state.config.max_frames


def test_image_models_list_the_routes_of_their_tasks(
    http: httpx.Client, live_server: LiveServer
) -> None:
    live_server.need("qwen")
    live_server.need("qwen-edit")
    assert list(http.get("/v1/models/qwen/knobs").json()["routes"]) == ["/v1/images/generations"]
    edit = http.get("/v1/models/qwen-edit/knobs").json()
    assert list(edit["routes"]) == ["/v1/images/edits"]


def test_a_speech_model_publishes_its_voices(http: httpx.Client, live_server: LiveServer) -> None:
    live_server.need("tts")
    knobs = http.get("/v1/models/tts/knobs").json()
    listed = {v["id"] for v in http.get("/v1/audio/voices", params={"model": "tts"}).json()["data"]}
    assert {v["id"] for v in knobs["voices"]} == listed
    assert knobs["clones_voices"] is False
    assert "voice" in knobs["routes"]["/v1/audio/speech"]


def test_a_chat_model_publishes_its_answer_modalities(chat_http: httpx.Client) -> None:
    knobs = chat_http.get("/v1/models/acme-omni/knobs").json()
    assert knobs["modalities"] == ["text", "audio"] and knobs["voices"]
    assert chat_http.get("/v1/models/acme-text/knobs").json()["modalities"] == ["text"]


def test_knobs_need_the_key_and_a_served_model(live_server: LiveServer, http: httpx.Client) -> None:
    missing = http.get("/v1/models/nope/knobs")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    anonymous = httpx.get(f"{live_server.url}/v1/models/wan/knobs", timeout=30)
    assert anonymous.status_code == 401
    # /v1/models/{id} still describes a model (the knobs route is registered before it).
    first = next(iter(live_server.state.models))
    assert http.get(f"/v1/models/{first}").json()["id"] == first


def test_a_model_id_ending_in_knobs_is_still_described(
    acme_chat: Any, with_chat_plugin: Any, tmp_path: Path
) -> None:
    """``/v1/models/{id}/knobs`` is registered first and takes any path: the id ``acme/knobs``
    must still reach the model's own description, and its knobs at ``.../knobs/knobs``."""
    from omni_core.testing import serve_on_thread

    checkpoint = acme_chat.build_tiny_chat(tmp_path / "ckpt")
    with (
        with_chat_plugin(),
        serve_on_thread(
            models=[{"id": "acme/knobs", "path": str(checkpoint)}], state_dir=tmp_path / "state"
        ) as url,
    ):
        described = httpx.get(f"{url}/v1/models/acme/knobs", timeout=60)
        assert described.status_code == 200, described.text
        assert described.json()["id"] == "acme/knobs"
        assert described.json()["object"] == "model"
        knobs = httpx.get(f"{url}/v1/models/acme/knobs/knobs", timeout=60).json()
        assert knobs["object"] == "model.knobs" and knobs["modality"] == "chat"
        missing = httpx.get(f"{url}/v1/models/acme/other/knobs", timeout=60)
        assert missing.status_code == 404
