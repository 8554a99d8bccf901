"""The versions: omni-core's own and the plugin API's (read by the plugin host)."""

__version__ = "0.3.0"

#: The plugin API version. A plugin declares the version it was built for as a module attribute
#: ``OMNI_PLUGIN_API = "2.1"``; plugins of another major version are reported and not loaded.
#: 2.0 (omni-core 0.2): denoiser knowledge is registered (``omni_register_denoisers``), the
#: pipeline base classes declare every member the core reads, benchmarks are registered.
#: 2.1 (omni-core 0.3): the lanes' names live in their faces (``omni_core.speech.ARState``);
#: the 2.0 spellings (``omni_core.ARState``) still resolve, with a DeprecationWarning.
PLUGIN_API_VERSION = "2.1"
