"""``omni deploy ray MODEL... --replicas N --gpus-per-replica G`` (or ``--config FILE``).

Starts (or joins, ``--address``) a Ray cluster, deploys one Ray Serve deployment per model plus
the ingress on ``--host:--port``, and stays in the foreground: SIGTERM or Ctrl+C deletes the
application gracefully (replicas finish their running requests, video jobs go back to the
shared store) and exits. ray is imported only when the command runs.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import click

from omni_core import ConfigError


def _models(models: tuple[str, ...], names: tuple[str, ...]) -> list[dict[str, str]]:
    if len(names) > len(models):
        raise click.BadParameter(f"{len(names)} --name values for {len(models)} models", "--name")
    out = []
    for i, model in enumerate(models):
        model_id, sep, path = model.partition("=")
        if not sep or not model_id or Path(model).exists():
            model_id, path = model, model
        out.append({"id": names[i] if i < len(names) else model_id, "path": path})
    return out


def _server_fields(options: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    storage = {k: options[k] for k in ("job_store", "output_store") if options[k]}
    if storage:
        fields["storage"] = storage
    for key in ("api_key", "state_dir", "max_batch", "max_queue"):
        if options[key] is not None:
            fields[key] = str(options[key]) if key == "state_dir" else options[key]
    if options["no_warmup"]:
        fields["warmup"] = False
    if options["warmup_request"]:
        try:
            fields["warmup_request"] = json.loads(options["warmup_request"])
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--warmup-request") from None
    for item in options["load_options"]:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--option")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        fields.setdefault("options", {})[key.strip()] = value
    return fields


def build_config(models: tuple[str, ...], options: dict[str, Any]) -> Any:
    """Flags (over a ``--config`` file's values) -> a validated ``DeployConfig``."""
    from omni_ray.config import DeployConfig, load_config_file

    data: dict[str, Any] = load_config_file(options["config"]) if options["config"] else {}
    if models:
        per_model = {
            "replicas": options["replicas"],
            "gpus_per_replica": options["gpus_per_replica"],
            "cpus_per_replica": options["cpus_per_replica"],
            "min_replicas": options["min_replicas"],
            "max_replicas": options["max_replicas"],
            "target_queue_per_replica": options["target_queue"],
        }
        per_model = {k: v for k, v in per_model.items() if v is not None}
        data["models"] = [{**m, **per_model} for m in _models(models, options["names"])]
    elif not data.get("models"):
        raise click.UsageError("give MODEL arguments or a --config file with [[models]]")
    data.setdefault("server", {}).update(_server_fields(options))
    for key in ("host", "port", "address"):
        if options[key] is not None:
            data[key] = options[key]
    try:
        config = DeployConfig(**data)
    except ValueError as exc:  # pydantic's ValidationError
        raise ConfigError(f"deploy settings: {exc}") from None
    for model in config.models:
        config.server_config(model)  # every replica's ServerConfig validates now
    return config


@click.group("deploy")
def deploy() -> None:
    """Run omni on a serving platform (installed by plugins: omni-ray adds `ray`)."""


@deploy.command("ray")
@click.argument("models", nargs=-1)
@click.option("--name", "names", multiple=True, help="Public id of the MODEL at that position.")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="TOML/JSON/YAML.")
@click.option("--replicas", type=click.IntRange(1), help="Replicas per model [default: 1].")
@click.option("--gpus-per-replica", type=click.FloatRange(0), help="[default: 1 with GPUs, else 0]")
@click.option("--cpus-per-replica", type=click.FloatRange(0), help="[default: 1]")
@click.option("--min-replicas", type=click.IntRange(0), help="Autoscaling floor.")
@click.option("--max-replicas", type=click.IntRange(1), help="Autoscaling ceiling (queue depth).")
@click.option("--target-queue", type=click.FloatRange(0, min_open=True), help="Jobs per replica.")
@click.option("--address", default=None, help="Ray cluster to join (default: start a local one).")
@click.option("--host", default=None, help="Ingress interface [default: 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="[default: 8000]")
@click.option("--api-key", envvar="OMNI_API_KEY", default=None, help="[env: OMNI_API_KEY]")
@click.option(
    "--job-store", envvar="OMNI_JOB_STORE", default=None, help="sqlite:///… | postgresql://…"
)
@click.option("--output-store", envvar="OMNI_OUTPUT_STORE", default=None, help="file:///… | s3://…")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--max-batch", type=click.IntRange(1, 256), default=None)
@click.option("--max-queue", type=click.IntRange(1), default=None)
@click.option("--option", "-o", "load_options", multiple=True, metavar="KEY=VALUE")
@click.option("--warmup-request", default=None, metavar="JSON")
@click.option("--no-warmup", is_flag=True)
def deploy_ray(models: tuple[str, ...], **options: Any) -> None:
    """Deploy MODEL(s) on Ray Serve: replicas of omni engines behind one OpenAI-compatible
    ingress. Several replicas (or hosts) need a shared --job-store/--output-store; on one host
    the default SQLite file and folder of --state-dir are shared by its replicas."""
    config = build_config(models, options)
    try:
        import ray
        from ray import serve
    except ImportError:
        raise ConfigError("omni deploy ray needs ray[serve]: pip install omni-ray") from None

    from omni_ray.app import build_application

    ray.init(
        address=config.address,
        include_dashboard=False,
        ignore_reinit_error=True,
        log_to_driver=False,
    )
    serve.start(http_options={"host": config.host, "port": config.port})
    gpus = float(ray.cluster_resources().get("GPU", 0))
    try:
        serve.run(build_application(config, gpus), name=config.name, route_prefix="/")
    except Exception as exc:  # noqa: BLE001 - a replica that cannot start (no model, bad option)
        serve.shutdown()
        raise ConfigError(f"the deployment did not start: {exc}") from None
    click.echo(
        f"omni: deployed {', '.join(m.id for m in config.models)} on Ray Serve at "
        f"http://{config.host}:{config.port}",
        err=True,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1):
        pass
    click.echo("omni: draining the replicas ...", err=True)
    started = time.monotonic()
    serve.delete(config.name)  # waits for the graceful shutdown of every replica
    serve.shutdown()
    click.echo(f"omni: stopped after {time.monotonic() - started:.0f} s", err=True)
