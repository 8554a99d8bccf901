"""What ``omni serve`` configures: the served models and the server's limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from omni_core.contract.requests import RequestLimits
from omni_core.serving.stores.config import StorageConfig

#: The defaults of the cost limits (``omni serve --max-*``): the standard sizes of real models
#: pass (Qwen-Image 1328x1328 up to 2048x2048, Wan 81-241 frames at 50 steps).
DEFAULT_MAX_PIXELS = 2048 * 2048
DEFAULT_MAX_STEPS = 200
DEFAULT_MAX_FRAMES = 241
DEFAULT_MAX_OUTPUTS = 4
DEFAULT_MAX_ASPECT_RATIO = 8.0
#: Decoded pixels of all input images of one request (4096x4096): the models resize inputs to
#: at most --max-pixels anyway; a 64-megapixel PNG took 22 s and 1.2 GB to decode. JPEGs above
#: it decode reduced (omni_core.serving.media.fit_pixels), other images are refused (413).
DEFAULT_MAX_UPLOAD_PIXELS = 4096 * 4096
DEFAULT_REQUEST_TIMEOUT_S = 1800.0
#: Pixel-steps (width x height x frames x steps x n) of one request: 1280x720 x 241 frames x 50
#: steps passes (1.1e10); 2048x2048 x 241 frames x 50 steps (5.1e10) does not.
DEFAULT_MAX_COST = 16_000_000_000
#: Connections uvicorn holds at once (more get 503 at once) and idle keep-alive seconds.
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_KEEP_ALIVE_S = 5.0
#: Seconds a client may take to send a request's headers, and then its body (slow clients that
#: hold connections open are closed; see omni_core.serving.connections).
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 60.0


class ModelSource(BaseModel):
    """A model to serve: its public id and where it loads from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    path: str = Field(min_length=1)
    pipeline: str | None = None


class ServerConfig(BaseModel):
    """Everything ``omni serve`` configures."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelSource] = Field(min_length=1)
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: str | None = None
    state_dir: Path = Field(default_factory=lambda: Path.home() / ".local/state/omni/serve")
    max_batch: int = Field(4, ge=1, le=256)
    #: Let seeded image and video requests share denoising steps with others: faster under
    #: load, but a batched forward rounds differently, so a seed then reproduces its output
    #: only when it runs alone (off: a seeded request always steps alone).
    batch_seeded: bool = False
    #: Milliseconds an idle engine waits after a request arrives for others to share its first
    #: step (omni_core.runtime.engine); 0: none.
    admit_window_ms: float = Field(0.0, ge=0, le=1000)
    max_queue: int = Field(64, ge=1)
    device: str | None = None
    dtype: str | None = None
    attention_backend: str | None = None
    #: Parallel layout of the served models (one worker process per device; see parallelism docs).
    cfg_parallel_size: int = Field(1, ge=1, le=2)
    ulysses_degree: int = Field(1, ge=1)
    max_upload_mb: float = Field(20.0, gt=0)
    max_images: int = Field(8, ge=1, le=64)
    #: Decoded pixels of all uploaded images of one request, read from their headers before
    #: anything is decoded (a 1 MB PNG can decode to gigabytes); JPEGs above it decode reduced.
    max_upload_pixels: int = Field(DEFAULT_MAX_UPLOAD_PIXELS, ge=1)
    allowed_url_hosts: tuple[str, ...] = ()
    #: Seconds an allowed-host URL fetch may take in all (connect, headers, body).
    url_fetch_timeout_s: float = Field(20.0, gt=0)
    #: Bound to loopback (``host``), answer only loopback ``Host`` headers (DNS rebinding; see
    #: omni_core.serving.guards). Off for an app that another server runs (e.g. Ray Serve's
    #: proxy) on an address other than ``host``.
    loopback_host_check: bool = True
    #: What a chat request that names no ``modalities`` and no ``audio`` gets from an omni
    #: model: ``"model"``, everything it answers with (text and speech: vLLM-Omni's default),
    #: or ``"text"`` (OpenAI's; plain text clients then never receive audio).
    chat_modalities: Literal["model", "text"] = "model"
    #: The audio format of a speech answer whose request names no ``response_format``: wav
    #: (vLLM-Omni's default, what its clients save as ``.wav``) or mp3 (OpenAI's), flac, pcm.
    speech_format: Literal["wav", "mp3", "flac", "pcm"] = "wav"
    #: Base of the absolute ``url``s in image responses (``--public-url``, e.g. behind a proxy);
    #: None: the base URL the request came in on.
    public_url: str | None = Field(None, max_length=2000, pattern=r"^https?://")
    #: Seconds a request may take, queue included; checked between denoising steps (or speech
    #: chunks), so a request past it stops at the next step and fails alone (504).
    request_timeout_s: float | None = Field(DEFAULT_REQUEST_TIMEOUT_S, gt=0)
    #: Operator limits on what one request may cost (checked after the pipeline's defaults).
    #: Finite by default (sdk-docs/docs/operations.md): a model's standard sizes pass.
    max_steps: int | None = Field(DEFAULT_MAX_STEPS, ge=1)
    max_pixels: int | None = Field(DEFAULT_MAX_PIXELS, ge=1)
    max_frames: int | None = Field(DEFAULT_MAX_FRAMES, ge=1)
    max_outputs: int | None = Field(DEFAULT_MAX_OUTPUTS, ge=1)
    max_aspect_ratio: float | None = Field(DEFAULT_MAX_ASPECT_RATIO, ge=1)
    max_cost: int | None = Field(DEFAULT_MAX_COST, ge=1)
    #: Every response carries its timings (``stage_durations``, ``peak_memory_mb``: see
    #: omni_core.serving.timings); off: only those whose request sends ``X-Omni-Timings: 1``.
    report_timings: bool = False
    warmup: bool = True
    #: The browser playground at ``/`` and ``/playground`` (omni_core.serving.playground).
    playground: bool = True
    #: Shared request fields of the warm-up of image and video models (e.g. a small size).
    warmup_request: dict[str, Any] = Field(default_factory=dict)
    shutdown_grace_s: float = Field(30.0, ge=0)
    #: uvicorn's connection cap (``limit_concurrency``) and idle keep-alive timeout.
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, ge=1)
    keep_alive_s: float = Field(DEFAULT_KEEP_ALIVE_S, gt=0)
    #: From a connection's opening (or the previous response's end) to the end of the headers,
    #: and from there to the end of the body; past either the connection is closed.
    header_timeout_s: float = Field(DEFAULT_HEADER_TIMEOUT_S, gt=0)
    body_timeout_s: float = Field(DEFAULT_BODY_TIMEOUT_S, gt=0)
    #: Where video jobs and outputs live and how long they are kept (``--job-store``,
    #: ``--output-store``, ``--retention-*``; sdk-docs/docs/operations.md).
    storage: StorageConfig = Field(default_factory=StorageConfig)
    #: The WebSocket text stream (``/v1/audio/speech/stream``): seconds without a message
    #: before a session is closed, and seconds a session may last in all.
    stream_idle_s: float = Field(30.0, gt=0)
    stream_max_s: float = Field(DEFAULT_REQUEST_TIMEOUT_S, gt=0)
    #: ``/v1/realtime`` sessions (omni_core.serving.realtime): sessions open at once, seconds a
    #: session may last, seconds without a client event, input audio bytes (PCM16 at 24 kHz:
    #: 48 000 a second) and user turns per session.
    realtime_max_sessions: int = Field(16, ge=1)
    realtime_max_s: float = Field(1800.0, gt=0)
    realtime_idle_s: float = Field(120.0, gt=0)
    realtime_max_audio_bytes: int = Field(int(27.5 * 1024 * 1024), ge=4800)
    realtime_max_turns: int = Field(200, ge=1)
    #: Append server-side timestamps of each streamed request here (``--timings-log``;
    #: omni_core.serving.timings); None: off.
    timings_log: Path | None = None
    #: Extra loading options passed to every pipeline (e.g. ``text_encoder_device``).
    options: dict[str, Any] = Field(default_factory=dict)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_body_bytes(self) -> int:
        """Whole request body: room for ``max_images`` uploads (base64 for JSON) plus fields."""
        return int(self.max_upload_bytes * 1.4) * self.max_images + 1024 * 1024

    @property
    def limits(self) -> RequestLimits:
        return RequestLimits(
            max_steps=self.max_steps,
            max_pixels=self.max_pixels,
            max_frames=self.max_frames,
            max_outputs=self.max_outputs,
            max_aspect_ratio=self.max_aspect_ratio,
            max_cost=self.max_cost,
        )

    def load_options(self) -> dict[str, Any]:
        """The ``Omni(...)`` keywords every served model loads with (``--option`` values win
        over the parallel layout flags, as they always did)."""
        options: dict[str, Any] = dict(self.options)
        if self.attention_backend:
            options["attention"] = self.attention_backend
        if self.cfg_parallel_size * self.ulysses_degree > 1:
            options.setdefault("cfg_parallel_size", self.cfg_parallel_size)
            options.setdefault("ulysses_degree", self.ulysses_degree)
        return {"device": self.device, "dtype": self.dtype, **options}
