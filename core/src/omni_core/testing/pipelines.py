"""Drive a pipeline class directly, without :class:`~omni_core.Omni`: load it with plain options,
run requests through the step loop the Python API runs.

A model plugin's fidelity tests load their pipeline once and compare each stage with the
reference (``prepare`` / ``step`` / ``decode``, batching, the prompt cache); these are the two
pieces of omni they need for that::

    from omni_core import GenerationRequest
    from omni_core.testing import pipeline_options, run_to_completion

    pipe = MyPipeline.from_pretrained(path, pipeline_options(dtype="float32"))
    (result,) = run_to_completion(pipe, [pipe.validate(GenerationRequest(prompt="a cat"))])

Through ``Omni`` (the options the core decides: attention routing, acceleration, memory) is the
other way, and the one the server takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.pipeline import PipelineOptions, StagedPipeline
    from omni_core.contract.types import GenerationRequest, GenerationResult


def pipeline_options(
    device: str = "cpu", dtype: str | torch.dtype = "float32", **extra: Any
) -> PipelineOptions:
    """Options to call ``from_pretrained`` with: ``device``, ``dtype`` (a torch dtype or its
    name), this process's platform and ``extra`` (the pipeline's own load options); everything
    else (attention, cache, quantization, memory) at its default."""
    import torch

    from omni_core.contract.pipeline import PipelineOptions
    from omni_core.contract.platforms import current_platform

    resolved = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return PipelineOptions(
        device=torch.device(device), dtype=resolved, platform=current_platform(), extra=extra
    )


def run_to_completion(
    pipeline: StagedPipeline, requests: list[GenerationRequest], *, max_batch: int = 8
) -> list[GenerationResult]:
    """Prepare every request, step them together (those with one batch key share each ``step``,
    at most ``max_batch`` at a time) until all are done, decode each: the loop ``Omni.generate``
    runs, so a batched result can be compared with each request's alone."""
    from omni_core.runtime.staged import run_to_completion as run

    return run(pipeline, requests, max_batch=max_batch)


def run_queued_together(
    omni: Any, asks: list[dict[str, Any]], *, name: str = "kit", timeout: float = 60.0
) -> list[GenerationResult]:
    """Queue every request of ``asks`` (``Omni.request`` keywords) on one fresh engine before it
    starts, so all are in flight from its first step (step-level batching across requests),
    then run it; the results in the order asked, to compare with each request run alone."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from omni_core.runtime import Engine

    engine = Engine(omni.pipeline, name=name)
    with ThreadPoolExecutor(len(asks)) as pool:
        futures = [pool.submit(engine.run, omni.request(**a), timeout) for a in asks]
        deadline = time.monotonic() + 30
        while engine.queue_depth < len(asks) and time.monotonic() < deadline:
            time.sleep(0.01)
        engine.start()
        try:
            return [f.result(timeout) for f in futures]
        finally:
            engine.stop()
