"""Building the Ray Serve application of a :class:`~omni_ray.config.DeployConfig`."""

from __future__ import annotations

import re
from typing import Any

from omni_ray.config import DeployConfig, ModelDeployment


def deployment_name(model_id: str, taken: set[str]) -> str:
    """A Ray deployment name for a model id (ids may be paths or hub ids)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", model_id).strip("-")[:60] or "model"
    base, n = name, 2
    while name in taken or name == "ingress":
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def deployment_options(
    model: ModelDeployment, config: DeployConfig, gpus: float, name: str
) -> dict[str, Any]:
    """``serve.deployment`` options of ``model``'s replicas."""
    from ray.serve.config import AutoscalingConfig, AutoscalingPolicy

    server = config.server_config(model)
    options: dict[str, Any] = {
        "name": name,
        "ray_actor_options": {"num_cpus": model.cpus_per_replica, "num_gpus": gpus},
        # a replica takes what its engine can queue; Ray keeps the rest at the ingress
        "max_ongoing_requests": server.max_queue + server.max_batch,
        "health_check_period_s": 5,
        "health_check_timeout_s": 30,
        "graceful_shutdown_wait_loop_s": 1,
        "graceful_shutdown_timeout_s": config.graceful_shutdown_s + server.shutdown_grace_s,
    }
    if model.autoscaling:
        options["autoscaling_config"] = AutoscalingConfig(
            min_replicas=model.min_replicas if model.min_replicas is not None else 1,
            max_replicas=model.max_replicas,
            initial_replicas=max(model.replicas, model.min_replicas or 1),
            # video work is minutes long: react in seconds, shrink only after two idle minutes
            metrics_interval_s=2,
            look_back_period_s=10,
            upscale_delay_s=5,
            downscale_delay_s=120,
            policy=AutoscalingPolicy(
                policy_function="omni_ray.autoscale:QueueDepthPolicy",
                policy_kwargs={"target": model.target_queue_per_replica},
            ),
        )
    else:
        options["num_replicas"] = model.replicas
    return options


def build_application(config: DeployConfig, cluster_gpus: float) -> Any:
    """The bound application: the ingress over one deployment per model."""
    from ray import serve

    from omni_ray.deployment import Ingress, ModelReplica
    from omni_ray.metrics import board

    board()  # replicas and the ingress report to / read from it
    handles = {}
    max_body = 0
    taken: set[str] = set()
    for model in config.models:
        gpus = model.gpus_per_replica
        if gpus is None:
            gpus = 1.0 if cluster_gpus >= 1 else 0.0
        server = config.server_config(model)
        max_body = max(max_body, server.max_body_bytes)
        options = deployment_options(model, config, gpus, deployment_name(model.id, taken))
        replica = serve.deployment(ModelReplica, **options)
        # host travels: a replica behind a loopback ingress answers loopback Host headers only
        # (DNS rebinding), one behind 0.0.0.0 (a Kubernetes service) answers any.
        fields = server.model_dump(mode="json", exclude={"models", "port"})
        handles[model.id] = replica.bind(model.source(), fields)
    ingress = serve.deployment(
        serve.ingress()(Ingress),
        name="ingress",
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=1000,
    )
    return ingress.bind(handles, max_body)


def build(args: dict[str, Any]) -> Any:
    """A Ray Serve application builder: ``import_path: omni_ray.app:build`` with ``args`` a
    :class:`DeployConfig` mapping, for ``serve run``/``serve deploy`` config files and
    KubeRay's RayService (``port``/``address`` there belong to Ray's own settings; ``host``
    says what the ingress is bound to: loopback, the default, makes every replica answer only
    loopback ``Host`` headers, so set it to ``0.0.0.0`` behind a Kubernetes service)."""
    import ray

    config = DeployConfig(**args)
    gpus = float(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0.0
    return build_application(config, gpus)
