"""One batched transformer forward of LTX-2: rows of several requests (of one size) at their
own steps, each with its prompt, as one call of diffusers' ``LTX2VideoTransformer3DModel``.

A forward is the main pass (conditional and unconditional rows), the spatio-temporal pass
(perturbed STG blocks) or the modality-isolation pass (no audio-video cross-attention): those
switches hold for a whole call, so each is a forward of its own. Each transformer call runs in
the step cache's context that ``context(rows)`` gives (a no-op without a cache).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # pragma: no cover
    from omni_ltx.prompts import Prompt
    from omni_ltx.setup import Setup


@dataclass
class Row:
    """One row of a forward: a request's latents at its step, with one of its prompts."""

    setup: Setup
    step: int
    prompt: Prompt
    request_id: str = ""
    which: str = "cond"  # cond, uncond, perturbed or isolated


@dataclass
class Forward:
    """The rows of one transformer call and the call's switches."""

    rows: list[Row]
    stg_blocks: tuple[int, ...] = field(default=())
    isolate: bool = False

    @property
    def branch(self) -> str:
        """Which pass this is (part of the step cache's context name)."""
        if self.isolate:
            return "isolated"
        if self.stg_blocks:
            return "stg-" + "-".join(str(b) for b in self.stg_blocks)
        return "main"


def _no_context(rows: list[Row]) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


def run_forward(
    transformer: Any,
    forward: Forward,
    shape: Setup,
    batch_rows: bool,
    context: Callable[[list[Row]], AbstractContextManager[None]] = _no_context,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(video, audio) velocity predictions in float32, one row per :class:`Row`."""
    dtype = transformer.dtype
    rows = forward.rows
    timestep = torch.cat([r.setup.timesteps[r.step : r.step + 1] for r in rows])
    inputs: dict[str, Any] = {
        "hidden_states": torch.cat([r.setup.latents for r in rows]).to(dtype),
        "audio_hidden_states": torch.cat([r.setup.audio_latents for r in rows]).to(dtype),
        "encoder_hidden_states": torch.cat([r.prompt[0] for r in rows]),
        "audio_encoder_hidden_states": torch.cat([r.prompt[1] for r in rows]),
        "encoder_attention_mask": torch.cat([r.prompt[2] for r in rows]),
        "sigma": timestep,
        "video_coords": torch.cat([r.setup.video_coords for r in rows]),
        "audio_coords": torch.cat([r.setup.audio_coords for r in rows]),
    }
    inputs["audio_encoder_attention_mask"] = inputs["encoder_attention_mask"]
    if shape.mask is None:
        inputs["timestep"] = timestep
    else:  # image to video: the image's tokens are at timestep 0
        masks = torch.cat([r.setup.mask for r in rows])  # type: ignore[misc]
        inputs["timestep"] = timestep.unsqueeze(-1) * (1 - masks)
        inputs["audio_timestep"] = timestep
    fixed = {
        "num_frames": shape.frames,
        "height": shape.height,
        "width": shape.width,
        "fps": shape.conditioning_fps,
        "audio_num_frames": shape.audio_frames,
        "isolate_modalities": forward.isolate,
        "spatio_temporal_guidance_blocks": list(forward.stg_blocks) or None,
        "perturbation_mask": None,
        "use_cross_timestep": True,
        "return_dict": False,
    }
    if batch_rows or len(rows) == 1:
        with context(rows):
            video, audio = transformer(**inputs, **fixed)
    else:  # a forward per row: low-precision kernels need not be batch-invariant
        outs = []
        for i in range(len(rows)):
            with context(rows[i : i + 1]):
                outs.append(transformer(**{k: v[i : i + 1] for k, v in inputs.items()}, **fixed))
        video = torch.cat([o[0] for o in outs])
        audio = torch.cat([o[1] for o in outs])
    return video.float(), audio.float()
