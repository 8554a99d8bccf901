"""The first test of omni-vibevoice: my plugin is discoverable and its specs validate."""

from omni_core.testing import assert_plugin_discoverable


def test_my_plugin_is_discoverable_and_its_specs_validate() -> None:
    # Loads the installed entry point in strict mode (right plugin API, known hooks, no name
    # clashes) and checks that every "module:attr" the specs point at exists.
    registry = assert_plugin_discoverable("omni-vibevoice")
    spec = registry.pipelines["vibevoice"]
    assert spec.plugin == "omni-vibevoice"
