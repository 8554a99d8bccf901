"""Property-based fuzzing of the live server's own OpenAPI schema (schemathesis): no 5xx, ever.

Positive cases (bodies that fit the schema) and negative ones (bodies that violate it) for every
operation; invalid input must be a 4xx with an OpenAI-style body. The session server's operator
limits (--max-steps/--max-pixels/--max-frames) keep generated valid requests cheap on CPU.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

# schemathesis' own strategies use `random` internally (its issue, not the server's).
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")

EXAMPLES = int(os.environ.get("OMNI_FUZZ_EXAMPLES", "12"))


def _operations(live_server: Any) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{live_server.url}/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


_MODEL_OF = {
    "/v1/images/generations": "qwen",
    "/v1/images/edits": "qwen-edit",
    "/v1/videos": "wan",
    "/v1/audio/speech": "tts",
}


def _cheap(strategy: Any, mode: Any) -> Any:
    """Half of the positive cases name the right model and get a tiny size and few steps, so
    they really generate (the others mostly stop at validation)."""
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    if mode != GenerationMode.POSITIVE:
        return strategy

    def shrink(pair: tuple[Any, bool]) -> Any:
        case, small = pair
        if (
            small
            and isinstance(case.body, dict)
            and ("prompt" in case.body or "input" in case.body)
        ):
            case.body["model"] = _MODEL_OF.get(case.path, case.body.get("model"))
        if small and isinstance(case.body, dict) and "prompt" in case.body:
            case.body["size"] = "32x32"
            case.body["num_inference_steps"] = 2
            if "num_frames" in case.body or case.path == "/v1/videos":
                case.body["num_frames"] = 5
        return case

    return st.tuples(strategy, st.booleans()).map(shrink)


def test_serve_fuzz_openapi_no_server_errors(live_server, http) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    headers = {"Authorization": f"Bearer {live_server.api_key}"}
    operations = _operations(live_server)
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    for expected in (
        "POST /v1/images/generations",
        "POST /v1/images/edits",
        "POST /v1/videos",
        "GET /v1/videos/{video_id}",
        "DELETE /v1/videos/{video_id}",
        "POST /v1/audio/speech",
        "GET /v1/models",
    ):
        assert expected in labels, labels
    seen: dict[str, set[int]] = {}
    calls: list[str] = []

    def fuzz(op: Any, mode: Any) -> None:
        label = f"{op.method.upper()} {op.path}"

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=_cheap(op.as_strategy(generation_mode=mode), mode))
        def run(case: Any) -> None:
            response = case.call(base_url=live_server.url, headers=headers, timeout=120)
            seen.setdefault(label, set()).add(response.status_code)
            calls.append(label)
            assert response.status_code < 500, (
                f"{label} -> {response.status_code}: {response.text[:500]}\n"
                f"{case.as_curl_command()}"
            )
            if response.status_code >= 400:
                body = response.json()
                assert set(body["error"]) == {"message", "type", "param", "code"}, body

        try:
            run()
        except Unsatisfiable:
            # Nothing in this operation can be made invalid (e.g. GET /health has no inputs).
            assert mode == GenerationMode.NEGATIVE, label

    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(op, mode)
    # Fuzzed video jobs must not keep the CPU busy for the rest of the suite.
    for job in http.get("/v1/videos", params={"limit": 100}).json()["data"]:
        if job["status"] in ("queued", "in_progress"):
            http.delete(f"/v1/videos/{job['id']}")
    assert len(calls) >= 10 * EXAMPLES, len(calls)
    generated = {label for label, codes in seen.items() if 200 in codes and "POST" in label}
    assert {"POST /v1/images/generations", "POST /v1/videos"} & generated, seen
    assert any(400 <= code < 500 for codes in seen.values() for code in codes), seen
