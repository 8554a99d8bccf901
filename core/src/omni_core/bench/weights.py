"""Real-size models with seeded random weights, written without ever holding an fp32 copy.

A 20B-parameter transformer is 80 GB in float32: building it normally and casting would not fit
the benchmark machine. :func:`write_random_model` builds the module on the meta device (no
memory), materialises each parameter directly in the target dtype on the target device, fills it
from a generator seeded by the parameter's name (same bytes on every run), and saves it with the
class's own ``save_pretrained`` (safetensors). Only parameters go to meta: buffers are built
as the class builds them (a VAE's persistent latent mean and std are saved with their class
defaults; non-persistent RoPE tables are not saved, the loader recomputes them).
"""

from __future__ import annotations

import gc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def write_random_model(
    model_cls: Any,
    config: Any,
    folder: Path,
    *,
    dtype: Any = "bfloat16",
    seed: int = 0,
    device: Any = None,
    max_shard_size: str = "10GB",
) -> int:
    """Save ``model_cls`` built from ``config`` with random weights to ``folder``.

    ``config`` is a dict of constructor keywords (diffusers models) or a config object
    (transformers models, ``model_cls(config)``). ``device`` defaults to the platform's first
    device (fast random numbers there). Returns the number of parameters written.

    Initialisation: norm scales 1, biases 0, every other weight N(0, 1/fan_in); this keeps each
    block's contribution to the residual stream visible at any width, so lossy modes show error.
    """
    import torch

    from omni_core.contract.dtypes import parse_dtype

    if device is None:
        from omni_core.contract.platforms import current_platform

        device = current_platform().device(0)
    dtype = parse_dtype(dtype, "bfloat16")
    with parameters_on_meta():
        model = model_cls(**config) if isinstance(config, dict) else model_cls(config)
    count = materialize_random_(model, torch.device(device), dtype, seed)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, max_shard_size=max_shard_size)
    del model
    gc.collect()
    return count


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside put each parameter on the meta device as it is registered, and
    keep their buffers where the class makes them: a persistent buffer made on meta (as a
    plain ``torch.device("meta")`` would) has no data to save."""
    import torch

    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: Any) -> None:
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def materialize_random_(module: Any, device: Any, dtype: Any, seed: int = 0) -> int:
    """Replace every (meta) parameter of ``module`` by a seeded random one; returns the count."""
    import torch

    done: dict[int, torch.nn.Parameter] = {}
    count = 0
    for module_name, child in module.named_modules():
        for param_name, param in list(child.named_parameters(recurse=False)):
            if id(param) not in done:
                full = f"{module_name}.{param_name}" if module_name else param_name
                kind = dtype if param.is_floating_point() else param.dtype
                tensor = torch.empty(param.shape, device=device, dtype=kind)
                _fill_(tensor, full, seed)
                done[id(param)] = torch.nn.Parameter(tensor, requires_grad=False)
                count += tensor.numel()
            setattr(child, param_name, done[id(param)])
    return count


def _fill_(tensor: Any, name: str, seed: int) -> None:
    import torch

    lowered = name.lower()
    vector = tensor.numel() == max(tensor.shape, default=1)
    with torch.no_grad():
        if not tensor.is_floating_point() or lowered.endswith("bias"):
            tensor.zero_()
        elif vector and ("norm" in lowered or lowered.endswith(("gamma", ".scale"))):
            tensor.fill_(1.0)
        else:
            generator = torch.Generator(device=tensor.device)
            generator.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
            fan_in = max(tensor.numel() // max(tensor.shape[0], 1), 1) if tensor.ndim > 1 else 1
            std = fan_in**-0.5 if tensor.ndim > 1 else 0.02
            tensor.normal_(0.0, std, generator=generator)


__all__ = ["materialize_random_", "parameters_on_meta", "write_random_model"]
