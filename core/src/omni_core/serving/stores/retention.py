"""The retention sweeper: finished jobs, their outputs and inputs, and the images answered by
URL expire by age and by the output store's total size, so the disk (or bucket) never fills.

One sweep (every ``interval_s``, on a background thread of the server):

1. terminal jobs that finished more than ``max_age_s`` ago are deleted with their files;
2. objects older than ``max_age_s`` are deleted (an expired video takes its job along);
3. while the store holds more than ``max_bytes``, the oldest objects go first.

Never touched: the input image of a job still queued or running (it is needed to run it), and
the output of a job running now. Several servers sweeping one store at once is harmless: every
delete is idempotent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from omni_core.serving.stores.base import ACTIVE, JobStore, OutputStore, StoredObject
from omni_core.serving.stores.config import RetentionPolicy

log = logging.getLogger("omni.serving")


@dataclass
class SweepReport:
    """What one sweep removed."""

    jobs: int = 0
    objects: int = 0
    bytes: int = 0
    #: What the store holds after the sweep.
    kept_bytes: int = 0


def _job_of(key: str) -> str | None:
    """The job a ``videos/ID.mp4`` object belongs to."""
    folder, _, name = key.partition("/")
    return name.rsplit(".", 1)[0] if folder == "videos" else None


class Sweeper:
    """Applies a :class:`RetentionPolicy` to a job store and an output store."""

    def __init__(self, jobs: JobStore, outputs: OutputStore, policy: RetentionPolicy) -> None:
        self.jobs = jobs
        self.outputs = outputs
        self.policy = policy
        self.next_at = 0.0

    def due(self, now: float) -> bool:
        return self.policy.enabled and now >= self.next_at

    def sweep(self, now: float | None = None) -> SweepReport:
        now = time.time() if now is None else now
        self.next_at = now + self.policy.interval_s
        report = SweepReport()
        age = self.policy.max_age_s
        if age is not None:
            while True:
                batch = self.jobs.finished_before(int(now - age))
                for record in batch:
                    self._drop_job(record.id, report)
                if len(batch) < 500:
                    break
        protected = self._protected()
        objects = sorted(
            (o for o in self.outputs.scan() if o.key not in protected), key=lambda o: o.mtime
        )
        kept: list[StoredObject] = []
        for obj in objects:
            if age is not None and obj.mtime < now - age:
                self._drop_object(obj, report)
            else:
                kept.append(obj)
        total = sum(o.size for o in kept) + sum(
            o.size for o in self.outputs.scan() if o.key in protected
        )
        if self.policy.max_bytes is not None:
            for obj in kept:
                if total <= self.policy.max_bytes:
                    break
                self._drop_object(obj, report)
                total -= obj.size
        report.kept_bytes = total
        if report.objects or report.jobs:
            log.info(
                "retention: removed %d jobs and %d objects (%d bytes); %d bytes kept",
                report.jobs,
                report.objects,
                report.bytes,
                report.kept_bytes,
            )
        return report

    def _protected(self) -> set[str]:
        keys: set[str] = set()
        for status in ACTIVE:
            for record in self.jobs.list(status=status, order="asc", limit=100_000):
                keys.update(k for k in (record.input_path, record.output_path) if k)
                keys.add(f"videos/{record.id}.mp4")  # being written by its server now
        return keys

    def _drop_job(self, job_id: str, report: SweepReport) -> None:
        record = self.jobs.delete(job_id)
        if record is None:
            return
        report.jobs += 1
        for key in (record.input_path, record.output_path):
            if key:
                self.outputs.delete(key)
                report.objects += 1

    def _drop_object(self, obj: StoredObject, report: SweepReport) -> None:
        self.outputs.delete(obj.key)
        report.objects += 1
        report.bytes += obj.size
        job_id = _job_of(obj.key)
        if job_id is not None and self.jobs.delete(job_id) is not None:
            report.jobs += 1  # its content is gone: the job has expired
