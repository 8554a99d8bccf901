"""How a request ran, in the fields vLLM-Omni's serving benchmark reads: ``stage_durations``
(seconds by stage) and ``peak_memory_mb``.

Opt-in: a request with the header ``X-Omni-Timings: 1`` gets them, and every response does on a
server started with ``--report-timings`` (or vLLM-Omni's name for it,
``--enable-diffusion-pipeline-profiler``: its benchmark sends no header). Where they go is
where that benchmark looks: images and edits at the top level and ``usage.peak_memory_mb``;
chat completions (chat and image models) in ``metrics``; a video job's record (``GET
/v1/videos/{id}``) at the top level with ``inference_time_s``; speech in the header
``X-Omni-Metrics`` (JSON), its body being audio.

The stages are omni's: ``queue`` (waiting for the engine), ``prepare`` (text encoding, inputs,
noise), ``denoise`` (the steps it was part of, batched or not), ``decode`` (the VAE), ``encode``
(the server's PNG / MP4 / audio encoding), ``first_token`` / ``first_audio`` / ``generate`` for
streamed answers, ``total``. ``peak_memory_mb`` is the device's peak allocation while the request
ran (shared with requests beside it; 0 where the platform cannot tell, as on CPU). The
per-request marks of ``--timings-log`` (profiling streamed speech) are
:mod:`omni_core.serving.timings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from fastapi import Request

    from omni_core.contract.types import GenerationResult
    from omni_core.serving.config import ServerConfig

#: The request header that asks for the timings of one response.
HEADER = "x-omni-timings"

#: ``result.timings`` keys -> stage names.
_STAGES = {
    "queue_s": "queue",
    "prepare_s": "prepare",
    "denoise_s": "denoise",
    "decode_s": "decode",
    "time_to_first_token_s": "first_token",
    "time_to_first_audio_s": "first_audio",
    "generate_s": "generate",
}


def requested(request: Request, config: ServerConfig) -> bool:
    """Whether this response carries its timings (the header, or ``--report-timings``)."""
    if config.report_timings:
        return True
    return request.headers.get(HEADER, "").strip().lower() in ("1", "true", "yes", "on")


def metrics(result: GenerationResult, encode_s: float | None = None) -> dict[str, Any]:
    """``{"stage_durations", "peak_memory_mb", "inference_time_s"}`` of a finished request;
    ``encode_s``: the server's encoding of its output."""
    timings = result.timings
    stages = {name: float(timings[key]) for key, name in _STAGES.items() if key in timings}
    total = float(timings.get("total_s", 0.0))
    if encode_s is not None:
        stages["encode"] = float(encode_s)
        total += float(encode_s)
    stages["total"] = total
    peak = result.peak_memory_bytes
    return {
        "stage_durations": {k: round(v, 6) for k, v in stages.items()},
        "peak_memory_mb": round(peak / 2**20, 3) if peak else 0.0,
        "inference_time_s": round(total, 6),
    }


__all__ = ["HEADER", "metrics", "requested"]
