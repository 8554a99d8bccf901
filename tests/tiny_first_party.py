"""The tiny checkpoint of every pipeline the repository's own packages register, by pipeline
name: what the warm-up tests (tests/test_first_party_warmups.py,
tests/serving/test_serve_default_warmup.py) load.

Each model plugin's own ``omni_<pkg>.testing`` builder makes them (one entry per kind of
checkpoint a pipeline loads: Wan's five layouts, Qwen3-TTS's three kinds, ...); the built-in
diffusers adapter gets a tiny ``DDPMPipeline`` that no plugin claims, and Piper the default
voice of the ``omni-tts[piper]`` extra (no tiny one exists). :func:`first_party_pipelines` lists
what is registered, so a new pipeline without an entry here fails the coverage test.
"""

from __future__ import annotations

import importlib
import importlib.util
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Tiny:
    """One tiny checkpoint: ``builder`` is ``"module:function"`` of a plugin's testing module,
    called as ``function(folder, **kwargs)``, or one of the builders below."""

    label: str
    builder: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self, folder: Path) -> str:
        """The checkpoint's path (or model name), built under ``folder``."""
        module, _, name = self.builder.partition(":")
        build: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return str(build(folder / self.label, **self.kwargs))


def _qwen(label: str, builder: str, **kwargs: Any) -> Tiny:
    return Tiny(label, f"omni_qwen.testing:{builder}", kwargs)


def _tts(label: str, family: str) -> Tiny:
    return Tiny(label, "omni_tts.testing:build_tiny_tts", {"family": family})


def _flux(variant: str) -> Tiny:
    return Tiny(f"flux-{variant}", "omni_flux.testing:build_tiny_flux", {"variant": variant})


def _wan(variant: str) -> Tiny:
    return Tiny(f"wan-{variant}", "omni_wan.testing:build_tiny_wan", {"variant": variant})


#: Pipeline name -> the tiny checkpoints it loads.
TINY: dict[str, tuple[Tiny, ...]] = {
    "qwen-image": (_qwen("qwen-image", "build_tiny_qwen_image", variant="t2i"),),
    "qwen-image-edit": (_qwen("qwen-image-edit", "build_tiny_qwen_image", variant="edit"),),
    "qwen-image-edit-plus": (
        _qwen("qwen-image-edit-plus", "build_tiny_qwen_image", variant="edit-plus"),
    ),
    "qwen2.5-omni": (_qwen("qwen25-omni", "build_tiny_qwen25_omni"),),
    "qwen3-omni": (_qwen("qwen3-omni", "build_tiny_qwen3_omni"),),
    "qwen3-tts": tuple(
        _qwen(f"qwen3-tts-{kind}", "build_tiny_qwen3_tts", kind=kind)
        for kind in ("custom_voice", "voice_design", "base")
    ),
    "vits": (_tts("vits", "vits"), _tts("vits-multi", "vits-multi")),
    "speecht5": (_tts("speecht5", "speecht5"),),
    "fastspeech2-conformer": (
        _tts("fastspeech2", "fastspeech2"),
        _tts("fastspeech2-hifigan", "fastspeech2-hifigan"),
    ),
    "csm": (_tts("csm", "csm"),),
    "piper": (Tiny("piper", f"{__name__}:default_piper_voice"),),
    "wan-t2v": (_wan("t2v"), _wan("t2v-a14b"), _wan("ti2v")),
    "wan-i2v": (_wan("i2v"), _wan("i2v-a14b")),
    "diffusers": (Tiny("ddpm", f"{__name__}:build_tiny_ddpm"),),
    "flux": tuple(_flux(v) for v in ("dev", "schnell")),
    "flux-kontext": (_flux("kontext"),),
    "flux2": (_flux("flux2"),),
    "flux2-klein": (_flux("flux2-klein"),),
    "z-image": (Tiny("z-image", "omni_zimage.testing:build_tiny_zimage"),),
    "stable-audio": (Tiny("stable-audio", "omni_stable_audio.testing:build_tiny_stable_audio"),),
    "hunyuan-video-1.5-t2v": (
        Tiny("hunyuan-video-1.5-t2v", "omni_hunyuan_video.testing:build_tiny_hunyuan_video15"),
    ),
    "hunyuan-video-1.5-i2v": (
        Tiny(
            "hunyuan-video-1.5-i2v",
            "omni_hunyuan_video.testing:build_tiny_hunyuan_video15",
            {"image_to_video": True},
        ),
    ),
    "vibevoice": (Tiny("vibevoice", "omni_vibevoice.testing:build_tiny_vibevoice"),),
    "dia": (Tiny("dia", "omni_dia.testing:build_tiny_dia"),),
    "pocket-tts": (Tiny("pocket-tts", "omni_pocket_tts.testing:build_tiny_pocket_tts"),),
    "ltx-2-t2v": (Tiny("ltx-2-t2v", "omni_ltx.testing:build_tiny_ltx2"),),
    "ltx-2-i2v": (Tiny("ltx-2-i2v", "omni_ltx.testing:build_tiny_ltx2", {"image_to_video": True}),),
}


def missing(pipeline: str) -> str | None:
    """Why ``pipeline``'s checkpoints cannot be had here (an optional extra), or None."""
    if pipeline == "piper":
        from omni_tts.piper import default_voice_dir, piper_available

        if not piper_available() or default_voice_dir() is None:
            return "the omni-tts[piper] extra (piper-tts and its default voice) is not installed"
    return None


def default_piper_voice(folder: Path) -> str:
    """Piper has no tiny voice: the default one of ``omni-tts[piper]``, by its model name."""
    return "piper"


def build_tiny_ddpm(folder: Path) -> Path:
    """A tiny random ``DDPMPipeline`` (no plugin claims it: the diffusers adapter serves it)."""
    import torch
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=16,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(folder)
    return folder


def repository_distributions() -> set[str]:
    """The distribution names of omni-core and every plugin of this repository."""
    projects = [ROOT / "core", *sorted((ROOT / "plugins").iterdir())]
    return {
        tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"]
        for p in projects
        if (p / "pyproject.toml").is_file()
    }


def first_party_pipelines() -> list[str]:
    """The pipeline names registered by the installed packages of this repository (the core's
    built-in adapter included, third-party plugins left out)."""
    from omni_core.contract.host import get_host

    host = get_host()
    ours = repository_distributions()
    plugins = {name for name, info in host.plugins.items() if info.distribution in ours}
    return sorted(
        name for name, spec in host.registry.kind("pipelines").items() if spec.plugin in plugins
    )
