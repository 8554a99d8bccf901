"""Loading an official Qwen2.5-Omni checkpoint with transformers' own classes.

The core hands ``from_pretrained`` a local folder (a Hub id is already a snapshot of its configs,
tokenizer files and safetensors). What else is read here:

- ``spk_dict.pt`` (the speakers: ``cond``, ``ref_mel``, ``bos_token``): a pickle, so it is loaded
  by transformers' ``load_speakers`` with ``weights_only=True`` only; when a Hub snapshot lacks it
  (the core fetches no ``.pt``) it is fetched into the snapshot with ``hf_hub_download``, which
  honours ``HF_HUB_OFFLINE`` and the cache.
- the processor: ``Qwen2_5OmniProcessor.from_pretrained``; where torchvision is missing (its video
  processor needs it) the same processor class is built from the tokenizer, feature extractor and
  image processor of the folder, and video parts are refused.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from omni_core import ConfigError

SPEAKERS_FILE = "spk_dict.pt"
log = logging.getLogger("omni.qwen")


def speakers_file(folder: Path) -> Path:
    """``folder/spk_dict.pt``, fetched into a Hub snapshot folder when missing there."""
    path = folder / SPEAKERS_FILE
    if path.is_file():
        return path
    match = re.search(r"models--([^/]+?)--([^/]+)/snapshots/([^/]+)$", folder.as_posix())
    if match is None:
        raise ConfigError(f"{folder}: {SPEAKERS_FILE} is missing (the speakers of the talker)")
    from huggingface_hub import hf_hub_download

    org, name, revision = match.groups()
    try:
        return Path(
            hf_hub_download(f"{org}/{name}", SPEAKERS_FILE, revision=revision, cache_dir=None)
        )
    except Exception as exc:  # offline cache miss, network, auth
        raise ConfigError(f"{org}/{name}: cannot get {SPEAKERS_FILE} ({exc})") from exc


def _without_video() -> type:
    from transformers import Qwen2_5OmniProcessor

    class Qwen2_5OmniProcessorNoVideo(Qwen2_5OmniProcessor):
        """transformers' processor with no video processor (torchvision is not installed)."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument is None and argument_name == "video_processor":
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return Qwen2_5OmniProcessorNoVideo


def load_processor(folder: Path) -> tuple[Any, bool]:
    """(the processor, whether it takes videos)."""
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        from transformers import Qwen2_5OmniProcessor

        try:
            return Qwen2_5OmniProcessor.from_pretrained(str(folder)), True
        except Exception as exc:  # noqa: BLE001 - e.g. no video processor files: go on without
            log.warning("%s: the processor loads without its video processor (%s)", folder, exc)
    from transformers import AutoImageProcessor, AutoTokenizer, WhisperFeatureExtractor

    template = folder / "chat_template.jinja"
    processor = _without_video()(
        image_processor=AutoImageProcessor.from_pretrained(str(folder)),
        video_processor=None,
        feature_extractor=WhisperFeatureExtractor.from_pretrained(str(folder)),
        tokenizer=AutoTokenizer.from_pretrained(str(folder)),
        chat_template=template.read_text("utf-8") if template.is_file() else None,
    )
    return processor, False


def load_model(folder: Path, *, device: Any, dtype: Any, audio_output: bool) -> Any:
    """``Qwen2_5OmniForConditionalGeneration`` from ``folder`` (safetensors only), on
    ``device``; without its talker and token2wav when ``audio_output`` is False. token2wav is
    kept in float32 (as transformers' ``generate`` runs it)."""
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    config = Qwen2_5OmniConfig.from_pretrained(str(folder))
    config.enable_audio_output = bool(audio_output)
    speakers_file(folder)
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(
        str(folder), config=config, dtype=dtype, use_safetensors=True
    )
    model = model.to(device).eval()
    if model.has_talker:
        model.token2wav.float()
    for module in model.modules():
        module.requires_grad_(False)
    return model
