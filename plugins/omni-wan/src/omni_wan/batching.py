"""Running requests that sit at different denoising steps in one forward (continuous batching).

Each state carries its own position in the precomputed schedule; when states at different steps
share a forward, their timesteps and scheduler weights are gathered per sample from device
tables, so the step stays free of host synchronisation.
"""

from __future__ import annotations

import torch

from omni_core.diffusion import DenoiseState, ScheduleTable


def weights_tensor(table: ScheduleTable) -> torch.Tensor:
    """The table's per-step weights as ``[steps, K + W]`` (zeros where a step uses fewer)."""
    k, w = table.sample_history, table.output_history
    rows = torch.zeros(table.num_steps, k + w, dtype=torch.float32)
    for n, (a, b) in enumerate(zip(table.sample_weights, table.output_weights, strict=True)):
        rows[n, : len(a)] = torch.tensor(a, dtype=torch.float32)
        rows[n, k : k + len(b)] = torch.tensor(b, dtype=torch.float32)
    return rows


def stack_slot(states: list[DenoiseState], key: str, index: int) -> torch.Tensor:
    """Slot ``index`` of every state's ``key`` history, batched; zeros where a state has none
    yet (a state that early gives that slot zero weight)."""
    parts = []
    for state in states:
        history = state.data[key]
        parts.append(
            history[index] if index < len(history) else torch.zeros_like(state.data["samples"][0])
        )
    return torch.cat(parts)


def apply_weights(
    weights: torch.Tensor, samples: list[torch.Tensor], outputs: list[torch.Tensor], k: int
) -> torch.Tensor:
    """x[n+1] per sample: ``weights`` is ``[B, K + W]`` over samples then outputs."""
    shape = (-1,) + (1,) * (samples[0].ndim - 1)
    result = samples[0] * weights[:, 0].view(shape)
    for i, tensor in enumerate(samples[1:], start=1):
        result = result.addcmul_(tensor, weights[:, i].view(shape))
    for j, tensor in enumerate(outputs):
        result = result.addcmul_(tensor, weights[:, k + j].view(shape))
    return result
