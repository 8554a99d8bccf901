"""Which speech pipeline speaks a model reference: :func:`resolve_speech_model` maps a
reference (a checkpoint, a voice file, an alias) to the pipeline that claims it;
:func:`default_speech_spec` is the pipeline that speaks when none is given (the one whose spec
names a ``default_model``, registered by its plugin)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.registry import PipelineSpec, Registry


def default_speech_spec(registry: Registry | None = None) -> PipelineSpec | None:
    """The speech pipeline that speaks when no model is given: the first (by name) whose spec
    names a ``default_model``; None when no installed plugin offers one."""
    if registry is None:
        from omni_core.contract.host import get_registry

        registry = get_registry()
    speech = (s for s in registry.pipelines.values() if s.modality == "speech")
    return next((s for s in sorted(speech, key=lambda s: s.name) if s.default_model), None)


def resolve_speech_model(
    model: str | os.PathLike[str] | None, registry: Registry | None = None
) -> tuple[str, dict[str, Any]]:
    """Map a speech model reference to ``(model, Omni keyword arguments)``.

    Checkpoints with a ``config.json`` go through the normal architecture lookup. Speech
    pipelines may also claim references that have none (a voice folder, a voice file, an alias)
    through the classmethod :meth:`~omni_core.contract.pipeline.Pipeline.resolve_model`; then the
    pipeline is chosen explicitly. ``None`` means the ``default_model`` of
    :func:`default_speech_spec`.
    """
    from omni_core.contract.errors import ModelNotFoundError

    if registry is None:
        from omni_core.contract.host import get_registry

        registry = get_registry()
    speech = [s for s in registry.pipelines.values() if s.modality == "speech"]
    defaults = {s.default_model for s in speech if s.default_model}
    if model is None:
        default = default_speech_spec(registry)
        if default is None or not default.default_model:
            raise ModelNotFoundError(
                "no default speech model: no installed speech pipeline offers one (omni-tts "
                "does, with its default-voice extra); pass --model"
            )
        ref = default.default_model
    else:
        ref = str(model)
    path = Path(ref).expanduser()
    has_config = path.is_dir() and (
        (path / "model_index.json").exists() or (path / "config.json").exists()
    )
    for spec in sorted(speech, key=lambda s: s.name):
        claimed = spec.load().resolve_model(ref)
        if claimed is not None:
            folder, voice = claimed
            kwargs: dict[str, Any] = {"pipeline": spec.name}
            if voice:
                kwargs["default_voice"] = voice
            return str(folder), kwargs
    if model is None or (ref in defaults and not has_config):
        raise ModelNotFoundError(f"speech model {ref!r} is not installed")
    return ref, {}
