"""LoRA adapters in one real `omni serve` process (`--lora`), driven by the official openai client:
requests with different adapters (and one with none) sent at once each produce what they
produce alone, the adapters are listed in /v1/models, an unknown one is a 400 naming it, and the
chat route takes `lora` too."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

STEPS = 3
BODY = {"seed": 7, "num_inference_steps": STEPS}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _loras(checkpoint: Path, root: Path) -> dict[str, Path]:
    import diffusers

    from omni_core.testing.lora import build_tiny_lora

    out = {}
    for seed, name in enumerate(("a", "b"), start=1):
        model = diffusers.QwenImageTransformer2DModel.from_pretrained(checkpoint / "transformer")
        out[name] = build_tiny_lora(
            model,
            root / f"{name}.safetensors",
            save=diffusers.QwenImagePipeline.save_lora_weights,
            seed=seed,
            std=0.3,
        )
    return out


@pytest.fixture(scope="module")
def lora_server(checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Any:
    if "qwen" not in checkpoints.paths:
        pytest.skip(f"qwen: {checkpoints.missing.get('qwen')}")
    root = tmp_path_factory.mktemp("serve-lora")
    qwen = checkpoints.paths["qwen"]
    loras = _loras(qwen, root)
    port, log = _free_port(), root / "server.log"
    warmup = json.dumps({"width": 32, "height": 32, "num_inference_steps": 2})
    cmd = [
        sys.executable,
        "-c",
        "from omni_core.cli import main; main()",
        "serve",
        f"qwen={qwen}",
        "--port",
        str(port),
        "--state-dir",
        str(root / "state"),
        "--lora",
        f"a={loras['a']}:0.8",
        "--lora",
        f"b={loras['b']}",
        "--max-batch",
        "4",
        "--warmup-request",
        warmup,
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited:\n{log.read_text()[-3000:]}")
            try:
                health = httpx.get(f"{url}/health", timeout=2)
                if health.status_code == 200:
                    break
                if health.json().get("errors"):
                    raise AssertionError(f"model failed to load: {health.json()['errors']}")
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"not healthy in time:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _client(url: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)


def _image(client: Any, lora: Any) -> np.ndarray:
    from PIL import Image

    extra = dict(BODY) if lora is None else {**BODY, "lora": lora}
    result = client.images.generate(
        model="qwen", prompt="a red cat", size="32x32", extra_body=extra
    )
    blob = base64.b64decode(result.data[0].b64_json)
    return np.asarray(Image.open(io.BytesIO(blob)).convert("RGB")).astype(np.int16)


def test_two_adapters_at_once_equal_each_alone(lora_server: str) -> None:
    client = _client(lora_server)
    cases = {"a": [{"name": "a"}], "b": [{"name": "b", "scale": 1.0}], "none": None}
    alone = {key: _image(client, lora) for key, lora in cases.items()}
    before = httpx.get(f"{lora_server}/v1/models").json()["data"][0]["lora"]["stats"]

    together: dict[str, np.ndarray] = {}
    start = threading.Barrier(len(cases))

    def run(key: str) -> None:
        start.wait()
        together[key] = _image(client, cases[key])

    threads = [threading.Thread(target=run, args=(key,)) for key in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert set(together) == set(cases)
    for key in cases:
        assert np.array_equal(together[key], alone[key]), f"{key}: differs from its solo run"
    # The adapters really changed the output, and each is different from the other.
    assert np.abs(alone["a"] - alone["none"]).max() > 8
    assert np.abs(alone["a"] - alone["b"]).max() > 8
    after = httpx.get(f"{lora_server}/v1/models").json()["data"][0]["lora"]["stats"]
    assert after["switches"] > before["switches"]


def test_models_lists_the_adapters(lora_server: str) -> None:
    model = _client(lora_server).models.retrieve("qwen")
    lora = model.model_extra["lora"]
    names = {a["name"]: a for a in lora["adapters"]}
    assert set(names) == {"a", "b"}
    assert names["a"]["scale"] == 0.8 and names["a"]["components"] == ["transformer"]
    assert lora["fused"] is None


def test_unknown_adapter_is_a_400_naming_it(lora_server: str) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        _image(_client(lora_server), [{"name": "a"}, {"name": "nope"}])
    error = info.value.body
    assert error["param"] == "lora" and "'nope'" in error["message"]
    assert "loaded: a, b" in error["message"]


def test_chat_route_takes_lora(lora_server: str) -> None:
    client = _client(lora_server)
    alone = _image(client, [{"name": "b"}])
    from PIL import Image

    response = client.chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": "a red cat"}],
        extra_body={**BODY, "size": "32x32", "lora": [{"name": "b"}]},
    )
    part = response.choices[0].message.content[0]  # a list of image_url parts
    url = part["image_url"]["url"]
    blob = base64.b64decode(url.split(",", 1)[1])
    image = np.asarray(Image.open(io.BytesIO(blob)).convert("RGB")).astype(np.int16)
    assert np.array_equal(image, alone)
