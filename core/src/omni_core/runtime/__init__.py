"""The runtime every lane shares: the engine, slot runtimes, KV caches, sampling, CUDA graphs,
kernels and the device platform.

The :class:`Engine` serves one loaded pipeline from one worker thread (step-level batching of
staged pipelines; one shared step of a :class:`SharedRuntime` for streamed ones). Autoregressive
pipelines of any lane subclass :class:`AutoregressivePipeline`: requests join and leave the cache
slots of one runtime between steps (a :class:`SlotCache` behind transformers' ``Cache`` API),
sample with :class:`Sampling` / :func:`sample_tokens`, and replay fixed-shape decode steps as
CUDA graphs (:class:`GraphRunner`, :class:`StaticSlotView`, :class:`StaticKVCache`,
:func:`bucket_for`). :func:`sdpa`, :class:`Platform` and :func:`resolve_model_path` are what a
platform or model plugin needs of the machine and the Hub. A request cancelled between steps
(by the engine, or ``should_cancel`` of ``Omni.generate``) ends with
:class:`RequestCancelledError`.
"""

from omni_core.contract.faces import Face

_face = Face(
    __name__,
    {
        "omni_core.runtime.engine": ("Engine",),
        "omni_core.contract.pipeline": ("StreamedPipeline", "SharedRuntime", "PolledStream"),
        "omni_core.runtime.autoregressive": ("AutoregressivePipeline",),
        "omni_core.runtime.cache": ("SlotCache",),
        "omni_core.runtime.graphs": (
            "GraphRunner",
            "StaticSlotView",
            "StaticKVCache",
            "bucket_for",
            "batch_buckets",
            "key_bucket",
            "precapture",
            "SlotIndex",
        ),
        "omni_core.runtime.sampling": (
            "Sampling",
            "sample_tokens",
            "sample_rows",
            "row_uniform",
            "apply_repetition_penalty",
        ),
        "omni_core.runtime.kernels.sdpa": ("sdpa",),
        "omni_core.runtime.loading": ("resolve_model_path",),
        "omni_core.contract.platforms": ("Platform", "CudaPlatform"),
        "omni_core.contract.errors": ("RequestCancelledError",),
    },
)
__getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names
