"""Every registered real-size benchmark workload builds its checkpoint's configs on the CPU.

The real-size builders run only on the GPU machine, where a config the installed transformers
or diffusers rejects (a stale per-layer list, a renamed field) costs a whole device call. Here
each one runs with one block and a writer that builds the model the way ``write_random_model``
does (parameters on meta: every config is validated by the real class, no weights are made),
checks that every tensor the checkpoint will save other than the parameters has data (a
persistent buffer left on meta fails ``save_pretrained`` after the whole build), and saves its
config only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from omni_core.bench import Workload
from omni_core.contract.host import get_registry
from omni_core.contract.registry import load_object

REAL = sorted(name for name, spec in get_registry().benchmarks.items() if not spec.tiny)


def _configs_only(
    self: Workload, model_cls: Any, config: Any, folder: Path, *, seed: int = 0, device: Any = None
) -> int:
    """``write_random_model`` without weights: the class built with its parameters on meta,
    its saved buffers checked, its config saved."""
    from omni_core.bench.weights import parameters_on_meta

    with parameters_on_meta():
        model = model_cls(**config) if isinstance(config, dict) else model_cls(config)
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    empty = [n for n, t in model.state_dict().items() if t.is_meta and n not in parameters]
    assert not empty, (model_cls.__name__, empty[:5])
    folder.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "save_config"):  # diffusers models
        model.save_config(folder)
    else:  # transformers models
        model.config.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def test_real_workloads_are_registered() -> None:
    assert len(REAL) >= 8, REAL  # wan, qwen-image and the five issue-29 families at least


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_real_size_builder_configs_construct(name: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(Workload, "write_random_model", _configs_only)
    workload = load_object(get_registry().benchmarks[name].implementation).with_layers(1)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    workload.build_checkpoint(folder)
    index = folder / "model_index.json"
    assert index.is_file() or (folder / "config.json").is_file()
    if index.is_file():
        entries = json.loads(index.read_text())
        components = [k for k, v in entries.items() if isinstance(v, list) and v[0]]
        for component in components:
            assert (folder / component).is_dir(), (name, component)
