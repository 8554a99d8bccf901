"""Loading an official Qwen2.5-Omni checkpoint with transformers' own classes.

The core hands ``from_pretrained`` a local folder (a Hub id is already a snapshot of its configs,
tokenizer files and safetensors). What else is read here:

- ``spk_dict.pt`` (the speakers: ``cond``, ``ref_mel``, ``bos_token``): a pickle, so it is loaded
  by transformers' ``load_speakers`` with ``weights_only=True`` only; when a Hub snapshot lacks it
  (the core fetches no ``.pt``) it is fetched into the snapshot with ``hf_hub_download``, which
  honours ``HF_HUB_OFFLINE`` and the cache.
- the processor: ``Qwen2_5OmniProcessor.from_pretrained``; where torchvision is missing (its video
  processor needs it) the same processor class is built from the tokenizer, feature extractor and
  image processor of the folder (:mod:`.processors`), and video parts are refused.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from omni_core import ConfigError

SPEAKERS_FILE = "spk_dict.pt"


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


#: ``Model config: NAME must be None or an integer within the vocabulary ...``: transformers'
#: check of one ``*_token_id`` field.
_VOCABULARY_WARNING = "within the vocabulary"


class _VocabularyWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _VOCABULARY_WARNING not in record.getMessage()


def quiet_default_talker_config() -> None:
    """Keep transformers' warnings about its own default talker config out of the log.

    transformers checks a talker config's text-token ids (``tts_text_*``, ``vision_*``,
    ``audio_*``: ids of the thinker's vocabulary) against the talker's codec vocabulary, so its
    default ``Qwen2_5OmniTalkerConfig`` (the published checkpoint's values) fails the check, and
    every config repr and ``save_pretrained`` builds that default: seven warnings on each load,
    about nothing in the checkpoint. transformers warns once per message, so building the
    default once here with those warnings dropped keeps them out; a checkpoint whose own ids
    differ is still warned about (another message)."""
    from transformers import Qwen2_5OmniTalkerConfig

    logger = logging.getLogger("transformers.configuration_utils")
    quiet = _VocabularyWarnings()
    logger.addFilter(quiet)
    try:
        Qwen2_5OmniTalkerConfig()
    finally:
        logger.removeFilter(quiet)


def load_processor(folder: Path) -> tuple[Any, bool]:
    """(the processor, whether it takes videos)."""
    from transformers import Qwen2_5OmniProcessor

    from .processors import load_processor as load

    return load(folder, Qwen2_5OmniProcessor)


def load_model(folder: Path, *, device: Any, dtype: Any, audio_output: bool) -> Any:
    """``Qwen2_5OmniForConditionalGeneration`` from ``folder`` (safetensors only), on
    ``device`` (``device_map``: the shards are read straight into device memory, not copied
    through the host); without its talker and token2wav when ``audio_output`` is False. token2wav is
    kept in float32 (as transformers' ``generate`` runs it)."""
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    quiet_default_talker_config()
    config = Qwen2_5OmniConfig.from_pretrained(str(folder))
    config.enable_audio_output = bool(audio_output)
    speakers_file(folder)
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(
        str(folder), config=config, dtype=dtype, use_safetensors=True, device_map={"": device}
    )
    model = model.eval()
    if model.has_talker:
        model.token2wav.float()
    for module in model.modules():
        module.requires_grad_(False)
    return model
