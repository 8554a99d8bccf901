"""What the core makes of a platform plugin: which platform it selects, and why.

A platform plugin's tests load it into a host (:func:`~omni_core.testing.isolated_host` plus
``host.load_module``), fake the machine (device nodes, an importable stand-in of the vendor's
torch extension) and check the core's choice::

    from omni_core.testing import isolated_host, select_platform

    with isolated_host() as host:
        host.load_module("omni-platform-mine", "omni_platform_mine.plugin")
        selection = select_platform(host.registry)
        assert selection.spec.name == "mine", selection.reason

- :func:`select_platform` (``registry, forced=None``): the :class:`Selection` (``spec``,
  ``platform``, ``reason``) the core makes, honouring ``OMNI_PLATFORM`` as ``omni`` does;
- :func:`check_available` (``spec``): a platform's detector, run the way ``omni doctor`` runs it;
- :func:`current_platform`: this process's platform, selected on first use from the process-wide
  host (its environment defaults applied then); ``isolated_host`` starts and ends with a fresh
  choice, so a test inside one sees its own host's.
"""

from __future__ import annotations

from omni_core.contract.platforms import (
    Selection,
    check_available,
    current_platform,
    select_platform,
)

__all__ = ["Selection", "check_available", "current_platform", "select_platform"]
