"""omni-ray's parts without a cluster: the config file and flags, the CLI's one-line errors, the
metrics merge over real omni registries, the queue-depth policy on Ray's own context class,
and the ASGI relay streaming a real FastAPI app's response message by message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from omni_core.testing import run_cli

pytest.importorskip("ray.serve", reason="omni-ray's tests need ray[serve]: run `nox -s ray`")

from omni_ray.autoscale import QueueDepthPolicy, desired_replicas
from omni_ray.config import DeployConfig, load_config_file
from omni_ray.metrics import merge_metrics


def test_ray_config_file_and_flags(tmp_path: Path) -> None:
    from omni_ray.commands import build_config

    path = tmp_path / "deploy.toml"
    path.write_text(
        'host = "0.0.0.0"\nport = 9000\n[server]\nmax_batch = 2\n'
        '[server.storage]\njob_store = "postgresql://omni@db/omni"\n'
        '[[models]]\nid = "wan"\npath = "/ckpt/wan"\nmin_replicas = 1\nmax_replicas = 4\n'
        "gpus_per_replica = 1\n"
    )
    config = DeployConfig(**load_config_file(path))
    (wan,) = config.models
    assert wan.autoscaling and config.port == 9000
    server = config.server_config(wan)
    assert server.max_batch == 2 and server.storage.job_store == "postgresql://omni@db/omni"
    options = {
        "config": path,
        "names": (),
        "replicas": 3,
        "gpus_per_replica": 2.0,
        "cpus_per_replica": None,
        "min_replicas": None,
        "max_replicas": None,
        "target_queue": None,
        "address": "ray://head:10001",
        "host": None,
        "port": None,
        "api_key": "k",
        "job_store": None,
        "output_store": "s3://out/omni",
        "state_dir": None,
        "max_batch": None,
        "max_queue": None,
        "load_options": ("cfg_batch=true",),
        "warmup_request": None,
        "no_warmup": True,
    }
    flagged = build_config(("a=/ckpt/a", "/ckpt/b"), options)
    assert [(m.id, m.path, m.replicas, m.gpus_per_replica) for m in flagged.models] == [
        ("a", "/ckpt/a", 3, 2.0),
        ("/ckpt/b", "/ckpt/b", 3, 2.0),
    ]
    server = flagged.server_config(flagged.models[0])
    assert server.storage.output_store == "s3://out/omni" and server.options == {"cfg_batch": True}
    assert server.api_key == "k" and not server.warmup and flagged.address == "ray://head:10001"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[[models]]\nid = "a"\npath = "p"\nreplicas = 0\n', "replicas"),
        ('[[models]]\nid = "a"\npath = "p"\n[server]\nmax_batchh = 3\n', "max_batchh"),
        ('[[models]]\nid = "a"\npath = "p"\n[[models]]\nid = "a"\npath = "q"\n', "unique"),
        ("models = [", "does not parse"),
    ],
)
def test_ray_bad_config_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "deploy.toml"
    path.write_text(text)
    result = run_cli("deploy", "ray", "--config", str(path))
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output


def test_ray_command_needs_models() -> None:
    result = run_cli("deploy", "ray")
    assert result.exit_code == 2 and "give MODEL arguments or a --config" in result.output


def test_ray_metrics_of_every_replica_merge_into_one_exposition() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from omni_core.testing import server_metrics

    texts = {}
    for replica, queued in (("r1", 3), ("r2", 5)):
        metrics = server_metrics()
        metrics.queue.labels("wan").set(queued)
        metrics.jobs.labels("wan", "completed").inc()
        texts[replica] = ("wan", metrics.render().decode())
    merged = merge_metrics(texts)
    families = {f.name: f for f in text_string_to_metric_families(merged)}
    queue = {s.labels["replica"]: s.value for s in families["omni_queue_depth"].samples}
    assert queue == {"r1": 3.0, "r2": 5.0}
    jobs = [s for s in families["omni_video_jobs"].samples if s.name.endswith("_total")]
    assert sorted(s.labels["replica"] for s in jobs) == ["r1", "r2"]
    assert merged.count("# TYPE omni_queue_depth gauge") == 1


def test_ray_queue_depth_policy_on_rays_context() -> None:
    from ray.serve._private.common import DeploymentID, ReplicaID
    from ray.serve.config import AutoscalingContext

    one, two = (ReplicaID(f"r{i}", DeploymentID("wan", "omni")) for i in (1, 2))

    def context(metrics: dict) -> AutoscalingContext:
        return AutoscalingContext(
            deployment_id=DeploymentID("wan", "omni"),
            deployment_name="wan",
            app_name="omni",
            current_num_replicas=2,
            target_num_replicas=2,
            running_replicas=[one, two],
            total_num_requests=0.0,
            total_queued_requests=0.0,
            aggregated_metrics=metrics,
            raw_metrics={},
            capacity_adjusted_min_replicas=1,
            capacity_adjusted_max_replicas=8,
            policy_state={},
            last_scale_up_time=None,
            last_scale_down_time=None,
            current_time=None,
            config=None,
        )

    policy = QueueDepthPolicy(target=2)
    # 7 jobs waiting in the store (each replica sees the same store) + 1 running on each: 9 / 2.
    busy = {"omni_store_queued": {one: 7.0, two: 7.0}, "omni_replica_load": {one: 1.0, two: 1.0}}
    assert policy(context(busy))[0] == 5
    idle = {"omni_store_queued": {one: 0.0, two: 0.0}, "omni_replica_load": {one: 0.0, two: 0.0}}
    assert policy(context(idle))[0] == 1
    assert policy(context({}))[0] == 2  # no report yet: keep what there is
    assert desired_replicas(4, 2) == 2 and desired_replicas(4.5, 2) == 3


def test_ray_relay_streams_a_real_app_message_by_message() -> None:
    from omni_ray.asgi import call_app, pack

    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> StreamingResponse:
        body = await request.body()

        async def chunks():
            for part in body.split(b","):
                yield part
                await asyncio.sleep(0)

        return StreamingResponse(chunks(), media_type="text/plain", headers={"X-Seen": "1"})

    scope = {
        "method": "POST",
        "path": "/echo",
        "query_string": b"",
        "headers": [(b"content-type", b"text/plain")],
        "client": ("127.0.0.1", 5),
        "server": ("127.0.0.1", 80),
    }

    async def run() -> list[dict]:
        return [m async for m in call_app(app, pack(scope, b"a,b,c"))]

    messages = asyncio.run(run())
    start, *bodies = messages
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert (b"x-seen", b"1") in start["headers"]
    assert [m["body"] for m in bodies if m["body"]] == [b"a", b"b", b"c"]
    assert bodies[-1].get("more_body", False) is False
