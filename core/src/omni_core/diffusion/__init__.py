"""The diffusion lane: staged pipelines (prepare / step / decode) and what makes them fast.

A diffusion plugin subclasses :class:`StagedPipeline` (the engine drives it one denoising step
at a time, batching compatible requests), precomputes its scheduler with :class:`ScheduleTable`,
routes its attention through the core's dispatcher (:func:`route_attention`) and tells the core
about its denoiser class with a :class:`DenoiserAdapter` (repeated blocks, cache calibration,
:class:`SequencePlan`). Acceleration (:func:`apply_acceleration`: compile, quantization, step
caches), parallelism (:func:`parallelize_denoiser`), LoRA (:class:`AdapterSet`), offload and
VAE tiling work on any such pipeline; :func:`psnr` / :func:`ssim` measure what a lossy speed-up
costs. Inside: ``generic`` (any diffusers pipeline),
``acceleration/``, ``distributed/``.
"""

from omni_core.contract.faces import Face

_face = Face(
    __name__,
    {
        "omni_core.contract.pipeline": ("StagedPipeline", "DenoiseState"),
        "omni_core.diffusion.schedule": ("ScheduleTable",),
        "omni_core.diffusion.attention_routing": ("route_attention",),
        "omni_core.diffusion.diffusers_compat": ("dtype_kwargs",),
        "omni_core.media.visual": ("request_image",),
        "omni_core.diffusion.denoisers": ("DenoiserAdapter", "SequencePlan", "DenoiserWrapper"),
        "omni_core.diffusion.acceleration": (
            "apply_acceleration",
            "AccelerationReport",
            "cache_key",
        ),
        "omni_core.diffusion.acceleration.quantization": ("QuantReport",),
        "omni_core.diffusion.acceleration.lora": ("AdapterSet",),
        "omni_core.diffusion.acceleration.offload": ("apply_offload", "load_device"),
        "omni_core.diffusion.acceleration.vae_tiling": ("VaeMemory", "activation_bytes"),
        "omni_core.diffusion.acceleration.quality": ("psnr", "ssim"),
        "omni_core.diffusion.lru": ("LRUCache",),
        "omni_core.diffusion.distributed.parallelize": ("parallelize_denoiser",),
        "omni_core.diffusion.distributed.cfg": ("cfg_parallel_forward",),
        "omni_core.diffusion.distributed.groups": ("current_parallel_state",),
    },
)
__getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names
