"""Built-in CLI commands, imported lazily by :mod:`omni_core.cli`."""
