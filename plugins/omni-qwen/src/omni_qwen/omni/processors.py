"""The Qwen-Omni processors (transformers' own), with or without their video processor.

transformers' video processors need torchvision; without it (or when a checkpoint lacks the
video processor's files) the processor is built from its other components and video parts are
refused by the pipeline. Both families' processors take the same components.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("omni.qwen")


def chat_template(folder: Path) -> str | None:
    """The chat template of ``folder`` (``chat_template.json`` or ``.jinja``), if any."""
    for name in ("chat_template.json", "chat_template.jinja"):
        path = folder / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            return json.loads(text)["chat_template"] if name.endswith(".json") else text
    return None


def _without_video(processor_class: type) -> type:
    class WithoutVideo(processor_class):  # type: ignore[misc, valid-type]
        """transformers' processor with no video processor."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument is None and argument_name == "video_processor":
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    WithoutVideo.__name__ = f"{processor_class.__name__}WithoutVideo"
    return WithoutVideo


def load_processor(folder: str | Path, processor_class: type) -> tuple[Any, bool]:
    """(``processor_class`` of ``folder``, whether it reads videos)."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    folder = Path(folder)
    if is_torchvision_available():
        try:
            return processor_class.from_pretrained(str(folder)), True
        except Exception as exc:  # noqa: BLE001 - e.g. no video processor files: go on without
            log.warning("%s: the processor loads without its video processor (%s)", folder, exc)
    processor = _without_video(processor_class)(
        image_processor=AutoImageProcessor.from_pretrained(str(folder)),
        video_processor=None,
        feature_extractor=AutoFeatureExtractor.from_pretrained(str(folder)),
        tokenizer=AutoTokenizer.from_pretrained(str(folder)),
        chat_template=chat_template(folder),
    )
    return processor, False
