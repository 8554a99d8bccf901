"""Specs validate on construction and the registry refuses silent duplicates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from omni_core.contract.errors import RegistrationError
from omni_core.contract.registry import (
    AttentionBackendSpec,
    PipelineSpec,
    PlatformSpec,
    Registry,
    load_object,
)


def _attention(name: str = "fast", **kw: object) -> AttentionBackendSpec:
    return AttentionBackendSpec(
        name=name, implementation="omni_core.runtime.kernels.sdpa:sdpa", device_types=("cpu",), **kw
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "Has Spaces"),
        ("name", "-leading-dash"),
        ("implementation", "no_colon_here"),
        ("implementation", "mod:attr:extra"),
    ],
)
def test_invalid_spec_fields_are_rejected_naming_the_field(field: str, value: str) -> None:
    kwargs: dict[str, object] = {
        "name": "ok",
        "implementation": "omni_core.runtime.kernels.sdpa:sdpa",
        "device_types": ("cpu",),
        field: value,
    }
    with pytest.raises(ValidationError) as excinfo:
        AttentionBackendSpec(**kwargs)
    assert excinfo.value.errors()[0]["loc"] == (field,)


def test_specs_are_frozen_and_forbid_unknown_fields() -> None:
    spec = _attention()
    with pytest.raises(ValidationError):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="device_typo"):
        AttentionBackendSpec(name="x", implementation="a:b", device_types=("cpu",), device_typo=1)  # type: ignore[call-arg]


def test_pipeline_spec_needs_a_task_and_knows_its_modality() -> None:
    with pytest.raises(ValidationError, match="tasks"):
        PipelineSpec(name="p", implementation="a:b", tasks=())
    assert PipelineSpec(name="p", implementation="a:b", tasks=("t2v",)).modality == "video"
    assert PipelineSpec(name="p", implementation="a:b", tasks=("tts",)).modality == "speech"
    assert PipelineSpec(name="p", implementation="a:b", tasks=("t2i",)).modality == "image"


def test_registry_stamps_the_plugin_and_refuses_a_duplicate_naming_both() -> None:
    registry = Registry()
    stamped = registry.add(_attention(), "vendor-a")
    assert stamped.plugin == "vendor-a"
    with pytest.raises(RegistrationError) as excinfo:
        registry.add(_attention(), "vendor-b")
    message = str(excinfo.value)
    assert "'vendor-a'" in message and "'vendor-b'" in message and "overrides=True" in message
    assert registry.attention_backends["fast"].plugin == "vendor-a"


def test_overrides_true_replaces_deliberately() -> None:
    registry = Registry()
    registry.add(_attention(), "builtin")
    registry.add(_attention(overrides=True, description="vendor kernel"), "vendor")
    assert registry.attention_backends["fast"].plugin == "vendor"
    assert registry.attention_backends["fast"].description == "vendor kernel"


def test_one_plugin_registering_a_name_twice_is_an_error() -> None:
    registry = Registry()
    registry.add(_attention(), "p")
    with pytest.raises(RegistrationError, match="twice"):
        registry.add(_attention(), "p")


def test_same_name_in_different_kinds_is_fine_and_by_plugin_lists_per_kind() -> None:
    registry = Registry()
    registry.add(_attention("cpu"), "p")
    registry.add(
        PlatformSpec(name="cpu", implementation="a:b", detector="a:c", device_type="cpu"), "p"
    )
    provides = registry.by_plugin("p")
    assert provides["attention_backends"] == ["cpu"]
    assert provides["platforms"] == ["cpu"]
    assert provides["pipelines"] == []
    assert {spec.name for spec in registry} == {"cpu"}


def test_platform_compatibility_is_sorted_and_load_object_follows_dotted_attrs() -> None:
    spec = PlatformSpec(
        name="x",
        implementation="a:b",
        detector="a:c",
        device_type="cpu",
        compatibility={"torch": ">=2.4", "omni-core": ">=0.1,<0.2"},
    )
    assert list(spec.compatibility) == ["omni-core", "torch"]
    assert load_object("omni_core.contract.registry:Availability.yes")().available is True


def test_denoiser_specs_are_found_by_class_name() -> None:
    from omni_core.contract.registry import DenoiserSpec

    registry = Registry()
    with pytest.raises(ValidationError, match="architectures"):
        DenoiserSpec(name="empty", implementation="a:b", architectures=())
    spec = DenoiserSpec(
        name="acme-transformer", implementation="acme.denoiser:adapter", architectures=("Acme3D",)
    )
    registry.add(spec, "acme")
    assert registry.denoisers["acme-transformer"].plugin == "acme"
    assert registry.denoiser_for("Acme3D") is registry.denoisers["acme-transformer"]
    assert registry.denoiser_for("Other") is None
    with pytest.raises(RegistrationError, match="both plugin 'acme' and plugin 'rival'"):
        registry.add(spec, "rival")


def test_benchmark_specs_name_their_pipeline() -> None:
    from omni_core.contract.registry import BenchmarkSpec

    with pytest.raises(ValidationError, match="pipeline"):
        BenchmarkSpec(name="w", implementation="a:b")  # type: ignore[call-arg]
    registry = Registry()
    registry.add(BenchmarkSpec(name="w", implementation="a:B", pipeline="acme", tiny=True), "x")
    assert registry.benchmarks["w"].tiny and registry.benchmarks["w"].pipeline == "acme"
