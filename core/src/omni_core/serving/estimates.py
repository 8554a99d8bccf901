"""How long a request would run, from its pipeline's measure of its work and the model's
measured speed, so a request that cannot finish before the server's timeout is refused before
it queues.

Every limit on a request's parts (``--max-pixels``, ``--max-steps``, ``--max-outputs``, ...)
can pass while their product holds an engine for half an hour before the timeout ends it
(2048x2048 x 4 images x 200 steps). The work of a request is its pipeline's to say, through the
contract (:meth:`~omni_core.contract.pipeline.Pipeline.work_units`; the default is its
pixel-steps); the speed is the model's own, in seconds of denoising per unit of work, measured
on its warm-up and on every request it finishes, the fastest seen (large requests use the
device best). Denoising is a lower bound of the run time (prepare and decode come on top), so a
request refused here could not have finished. A model without a measurement (served with
``--no-warmup``, before its first request finished) or a request its pipeline gives no work
(speech, chat) is never refused here.
"""

from __future__ import annotations

import threading

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.pipeline import Pipeline
from omni_core.contract.types import GenerationRequest, GenerationResult


class RunTimeEstimate:
    """One served model's speed (seconds of denoising per unit of work) and the check."""

    def __init__(self) -> None:
        #: The fastest seen; None until a request with work and denoising time has finished.
        self.seconds_per_unit: float | None = None
        self._lock = threading.Lock()

    def observe(
        self, pipeline: Pipeline, request: GenerationRequest, result: GenerationResult
    ) -> None:
        """Learn from a finished request (its denoising time over its work)."""
        work = pipeline.work_units(request)
        denoise = result.timings.get("denoise_s")
        if not work or work <= 0 or not denoise or denoise <= 0:
            return
        rate = float(denoise) / float(work)
        with self._lock:
            if self.seconds_per_unit is None or rate < self.seconds_per_unit:
                self.seconds_per_unit = rate

    def seconds(self, pipeline: Pipeline, request: GenerationRequest) -> float | None:
        """The estimated denoising seconds of ``request`` (None: no estimate yet, or no work)."""
        work = pipeline.work_units(request)
        rate = self.seconds_per_unit
        return None if work is None or rate is None else float(work) * rate

    def check(self, pipeline: Pipeline, request: GenerationRequest, limit_s: float | None) -> None:
        """Refuse (an InvalidRequestError naming ``--request-timeout``) a request estimated to
        run longer than ``limit_s``."""
        if limit_s is None:
            return
        estimate = self.seconds(pipeline, request)
        if estimate is None or estimate <= limit_s:
            return
        shape = (
            f"{request.width}x{request.height} pixels x {request.num_frames or 1} frame(s) x "
            f"{request.num_inference_steps} steps x {request.num_outputs or 1} output(s)"
            if request.width and request.height
            else "this request"
        )
        raise InvalidRequestError(
            f"this request ({shape}) would run about {estimate:,.0f} s at this model's "
            f"measured speed, above this server's request timeout of {limit_s:g} s "
            "(--request-timeout); ask for a smaller size, fewer frames, steps or outputs",
            param="size",
            code="limit_exceeded",
        )


__all__ = ["RunTimeEstimate"]
