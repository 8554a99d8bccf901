"""Autoscaling on queue depth: a Ray Serve policy that sizes a model's deployment by the work
waiting for it, not by HTTP requests in flight (a video job's POST returns at once; its work
waits in the job store).

Each replica reports (``ModelReplica.record_autoscaling_stats``) the video jobs queued in the
shared store for its model and its own engine load (queued + running requests). The desired
replica count is ``ceil((store queue + sum of engine loads) / target_queue_per_replica)``;
Ray Serve then applies the deployment's ``min_replicas``/``max_replicas`` and its up/down
delays.
"""

from __future__ import annotations

import math
from typing import Any


class QueueDepthPolicy:
    """``AutoscalingPolicy(policy_function=QueueDepthPolicy, policy_kwargs={"target": 2})``."""

    def __init__(self, target: float = 2.0) -> None:
        self.target = float(target)

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        metrics = ctx.aggregated_metrics or {}
        waiting = max(metrics.get("omni_store_queued", {}).values(), default=0.0)
        load = sum(metrics.get("omni_replica_load", {}).values())
        if not metrics:  # no report yet (replicas starting): keep what there is
            return ctx.current_num_replicas, ctx.policy_state
        desired = desired_replicas(waiting + load, self.target)
        return desired, ctx.policy_state


def desired_replicas(depth: float, target: float) -> int:
    """Replicas for ``depth`` units of queued work at ``target`` per replica (at least 1)."""
    return max(1, math.ceil(depth / target))
