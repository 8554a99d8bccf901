"""omni plugin entry point of omni-platform-npu (registers nothing until its features land)."""

from omni_core import PLUGIN_API_VERSION

OMNI_PLUGIN_API = PLUGIN_API_VERSION
