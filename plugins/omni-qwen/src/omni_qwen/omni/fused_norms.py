"""Qwen3-Omni's RMSNorms as torch's fused ``rms_norm`` (load option ``fused_norms``).

transformers' RMSNorm of these models (upcast to float32, square, mean, add eps, rsqrt,
multiply, cast back, multiply by the weight) is eight kernels in bfloat16. In a decode step at a
few rows each kernel costs a few microseconds whatever its size, and a captured thinker step
spends about a fifth of its device time in them (``bench/results/omni3-profile-h200.json``:
4,632 mean reductions, as many rsqrt, pow and add kernels in 24 steps). torch's
``nn.functional.rms_norm`` computes the same normalisation in float32 in one kernel on CUDA and
returns the input's dtype; the weight then multiplies in that dtype, as transformers does: two
kernels, the same formula, only the float32 reduction order differs.

That order is why it is opt-in: in float32 the answers equal transformers' ``generate()``
(the CPU tests), but in bfloat16 a norm's output can round to the neighbouring value, and on an
H200 with random weights (near-tied logits) the talker's greedy codes then part from
transformers' after a few frames (the text stayed equal). Measured there at the
Qwen3-Omni-30B-A3B sizes (``bench/results/omni3-fused-norms-h200.json``): the code predictor's
frame 11.2 -> 8.2 ms, RTF at one answer 0.32 -> 0.27, text-only 76 -> 89 tokens/s.

:func:`set_fused_rms_norms` gives each norm of the model's own classes (:data:`NORM_CLASSES`,
looked up in transformers' module) that forward as an instance attribute, or takes it away: the
modules, their weights and the class stay transformers' own, and a model can be switched back
(the benchmarks run several load options on one model object).
"""

from __future__ import annotations

from types import MethodType
from typing import Any

import torch

#: transformers' T5-style RMSNorm classes of Qwen3-Omni (thinker, talker, code predictor, code2wav).
NORM_CLASSES = (
    "Qwen3OmniMoeThinkerTextRMSNorm",
    "Qwen3OmniMoeTextRMSNorm",
    "Qwen3OmniMoeRMSNorm",
    "Qwen3OmniMoeCode2WavRMSNorm",
)


def _fused_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    normed = torch.nn.functional.rms_norm(
        hidden_states, self.weight.shape, eps=self.variance_epsilon
    )
    return self.weight * normed


def _classes() -> tuple[type, ...]:
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as modeling

    return tuple(getattr(modeling, name) for name in NORM_CLASSES if hasattr(modeling, name))


def set_fused_rms_norms(model: torch.nn.Module, on: bool) -> int:
    """Give (``on``) or take away the fused forward of every norm of :data:`NORM_CLASSES` in
    ``model``; returns how many norms run it now."""
    classes = _classes()
    count = 0
    for module in model.modules():
        if not isinstance(module, classes):
            continue
        if on:
            module.forward = MethodType(_fused_forward, module)
            count += 1
        elif "forward" in module.__dict__:
            del module.forward
    return count


__all__ = ["NORM_CLASSES", "set_fused_rms_norms"]
