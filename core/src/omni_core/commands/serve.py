"""``omni serve``: the OpenAI-compatible HTTP server (FastAPI on uvicorn). Long because every
server option is a click decorator here, next to the one function that builds the config."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from omni_core.commands.answer_options import answer_options
from omni_core.commands.connection_options import connection_options
from omni_core.commands.limit_options import limit_options
from omni_core.commands.memory_options import memory_options
from omni_core.commands.options import (
    acceleration_kwargs,
    acceleration_options,
    check_load_options,
    check_option_keys,
)
from omni_core.commands.realtime_options import realtime_options
from omni_core.commands.storage_options import storage_options
from omni_core.contract.errors import OmniError
from omni_core.serving.config import DEFAULT_REQUEST_TIMEOUT_S

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving import ServerConfig


class MissingExtraError(OmniError):
    """An optional dependency group of omni-core is not installed."""

    exit_code = 2


def require_serve_extra() -> None:
    """``omni serve`` needs FastAPI, uvicorn and friends (the ``serve`` extra): say so in one
    line, not with a traceback from the first import that fails."""
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401

        try:  # multipart forms (uploads); python-multipart's module was renamed in 0.0.13
            import python_multipart  # noqa: F401
        except ImportError:
            import multipart  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"omni serve needs the serve extra: pip install 'omni-core[serve]' ({exc})"
        ) from None


def _models(models: tuple[str, ...], names: tuple[str, ...]) -> list[dict[str, str]]:
    """MODEL arguments (optionally ``ID=PATH``) and ``--name`` aliases -> (id, path) pairs."""
    if len(names) > len(models):
        raise click.BadParameter(
            f"{len(names)} --name values for {len(models)} models", param_hint="--name"
        )
    out: list[dict[str, str]] = []
    for i, model in enumerate(models):
        model_id, sep, path = model.partition("=")
        if not sep or not model_id or Path(model).exists():
            model_id, path = model, model
        if i < len(names):
            model_id = names[i]
        out.append({"id": model_id, "path": path})
    ids = [m["id"] for m in out]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise click.BadParameter(
            f"model ids must be unique, repeated: {', '.join(duplicates)} (use --name to alias)",
            param_hint="MODEL",
        )
    return out


def _preflight(config: ServerConfig) -> None:
    """Fail before binding a port: a device, dtype or attention backend this machine cannot
    use, a model that cannot be found or that no pipeline serves (what ``Omni`` would find),
    a state folder that cannot be written."""
    import inspect

    from omni_core.api import Omni, locate_model
    from omni_core.api import check_load_options as check_pipeline_options
    from omni_core.contract.host import get_registry
    from omni_core.serving.stores.probe import check_state_dir

    check_state_dir(config.state_dir, config.storage.min_free_bytes)

    check_load_options(
        config.device, config.dtype, config.attention_backend, fp8=config.options.get("fp8") is True
    )
    check_option_keys(config.options)
    registry = get_registry()
    own = set(inspect.signature(Omni.__init__).parameters)  # Omni's keywords, not extras
    for source in config.models:
        location = locate_model(source.path, source.pipeline, registry=registry)
        extra = {k: v for k, v in config.options.items() if k not in own}
        check_pipeline_options(location.spec, extra)


@click.command("serve")
@click.argument("models", nargs=-1, required=True)
@click.option(
    "--name",
    "names",
    multiple=True,
    help="Public id of the MODEL at the same position (repeatable); default: MODEL.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to bind. The default accepts local clients only.",
)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--api-key",
    envvar="OMNI_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' on every /v1 route [env: OMNI_API_KEY].",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where video jobs and outputs persist [default: ~/.local/state/omni/serve].",
)
@click.option(
    "--max-batch",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Most requests stepped together; 1 turns step-level batching off.",
)
@click.option(
    "--batch-seeded",
    is_flag=True,
    default=False,
    help="Let seeded image and video requests share denoising steps: faster under load, but "
    "a seed then reproduces its output only when it ran alone (default: seeded requests "
    "step alone).",
)
@click.option(
    "--admit-window-ms",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 1000),
    help="When idle, wait this long after a request arrives for others to share its first "
    "step (answers sent together then start together; a lone request pays the wait).",
)
@click.option(
    "--max-queue",
    default=64,
    show_default=True,
    type=click.IntRange(1, 100000),
    help="Queued requests per model before new ones get 429.",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_REQUEST_TIMEOUT_S,
    show_default=True,
    help="Seconds a request may take (queue included); checked between steps (504). 0: none.",
)
@click.option("--device", default=None, help="torch device, e.g. cuda:0 (default: platform's).")
@click.option("--dtype", default=None, help="bfloat16 | float16 | float32.")
@click.option("--attention-backend", default=None, help="Attention backend for every role.")
@click.option(
    "--cfg-parallel-size",
    default=1,
    show_default=True,
    type=click.IntRange(1, 2),
    help="2: run CFG's two branches on two devices (one worker process each).",
)
@click.option(
    "--ulysses-degree",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Split each sequence over N devices (Ulysses).",
)
@click.option(
    "--option",
    "-o",
    "load_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Loading option for every model, passed to Omni(...): e.g. cache=teacache, "
    "quantization=fp8, cfg_batch=true (VALUE is JSON when it parses, else a string).",
)
@acceleration_options
@memory_options(into="load_options")
@storage_options
@click.option(
    "--max-upload-mb",
    default=20.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Largest accepted upload.",
)
@click.option(
    "--allowed-url-hosts",
    default="",
    show_default=False,
    help="Comma-separated hosts the server may fetch image URLs from (default: none).",
)
@limit_options
@click.option(
    "--report-timings",
    "--enable-diffusion-pipeline-profiler",
    "report_timings",
    is_flag=True,
    default=False,
    help="Every response carries its stage durations and peak memory (vLLM-Omni's fields, "
    "which its serving benchmark prints); without it only requests sending 'X-Omni-Timings: 1'.",
)
@connection_options
@realtime_options
@answer_options
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="Base of the image `url`s in responses (behind a proxy); default: the request's URL.",
)
@click.option("--no-warmup", is_flag=True, help="Skip the warm-up request of each model.")
@click.option(
    "--no-playground", is_flag=True, help="Leave out the browser playground at / and /playground."
)
@click.option(
    "--warmup-request",
    default=None,
    metavar="JSON",
    help="Shared fields of the warm-up request of image/video models, e.g. "
    '\'{"width": 256, "height": 256, "num_frames": 5}\' (default: the request each '
    "model's pipeline declares).",
)
@click.option(
    "--stream-idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a WebSocket text stream (/v1/audio/speech/stream) may stay silent.",
)
@click.option(
    "--stream-max-duration",
    type=click.FloatRange(min=0, min_open=True),
    default=1800.0,
    show_default=True,
    help="Seconds a WebSocket text stream session may last in all.",
)
@click.option(
    "--timings-log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Profiling: append server-side timestamps of each streamed request (JSON lines).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def serve(
    models: tuple[str, ...],
    names: tuple[str, ...],
    host: str,
    port: int,
    api_key: str | None,
    state_dir: Path | None,
    max_batch: int,
    batch_seeded: bool,
    admit_window_ms: float,
    max_queue: int,
    request_timeout: float,
    device: str | None,
    dtype: str | None,
    attention_backend: str | None,
    cfg_parallel_size: int,
    ulysses_degree: int,
    load_options: tuple[str, ...],
    cache: str | None,
    cache_options: tuple[str, ...],
    quantization: str | None,
    compile_: bool | None,
    fp8: bool,
    max_upload_mb: float,
    allowed_url_hosts: str,
    limits: dict[str, object],
    report_timings: bool,
    connections: dict[str, float],
    realtime: dict[str, float],
    answers: dict[str, str],
    public_url: str | None,
    no_warmup: bool,
    no_playground: bool,
    warmup_request: str | None,
    stream_idle_timeout: float,
    stream_max_duration: float,
    timings_log: Path | None,
    log_level: str,
    storage: object,
) -> None:
    """Serve MODEL(s) over an OpenAI-compatible HTTP API.

    Each MODEL is a local checkpoint folder or a Hugging Face Hub id, addressed in requests by
    its id (the argument, ``ID=PATH``, or --name). /health is 503 until every model is loaded
    and warmed.
    """
    import logging

    require_serve_extra()

    from omni_core.contract.errors import ConfigError
    from omni_core.serving import ServerConfig, create_app
    from omni_core.serving.app import serve_draining

    warmup_fields: dict[str, object] = {}
    if warmup_request:
        try:
            warmup_fields = json.loads(warmup_request)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--warmup-request") from None
        if not isinstance(warmup_fields, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--warmup-request")
    options: dict[str, object] = {}
    for item in load_options:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--option")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    for key, value in acceleration_kwargs(
        cache, cache_options, quantization, compile_, fp8
    ).items():
        if key in options:
            raise click.BadParameter(
                f"{key} is set twice: by --option {key}=... and by --{key}",
                param_hint="--option",
            )
        options[key] = value
    hosts = tuple(h.strip() for h in allowed_url_hosts.split(",") if h.strip())
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        click.echo(
            f"Warning: serving on {host} without an API key: anyone who can reach this "
            "port can use it (set --api-key or OMNI_API_KEY).",
            err=True,
        )
    try:
        config = ServerConfig(
            models=_models(models, names),
            host=host,
            port=port,
            api_key=api_key or None,
            max_batch=max_batch,
            batch_seeded=batch_seeded,
            admit_window_ms=admit_window_ms,
            max_queue=max_queue,
            request_timeout_s=request_timeout or None,
            device=device,
            dtype=dtype,
            attention_backend=attention_backend,
            cfg_parallel_size=cfg_parallel_size,
            ulysses_degree=ulysses_degree,
            max_upload_mb=max_upload_mb,
            allowed_url_hosts=hosts,
            warmup=not no_warmup,
            playground=not no_playground,
            warmup_request=warmup_fields,
            **limits,
            report_timings=report_timings,
            **connections,
            **realtime,
            **answers,
            public_url=public_url,
            options=options,
            storage=storage,
            timings_log=timings_log,
            stream_idle_s=stream_idle_timeout,
            stream_max_s=stream_max_duration,
            **({"state_dir": state_dir} if state_dir is not None else {}),
        )
    except ValueError as exc:  # pydantic's ValidationError
        raise ConfigError(str(exc)) from None
    _preflight(config)
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    app = create_app(config)
    click.echo(
        f"omni: serving {', '.join(m.id for m in config.models)} on "
        f"http://{host}:{port} (state: {config.state_dir})",
        err=True,
    )
    serve_draining(app, host=host, port=port, log_level=log_level)
