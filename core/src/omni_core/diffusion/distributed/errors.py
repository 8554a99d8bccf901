"""Errors of the distributed layer: OmniErrors, so users see one clear line."""

from __future__ import annotations

from omni_core.contract.errors import OmniError


class DistributedError(OmniError):
    """The parallel worker group cannot serve: it failed to start, or is unhealthy or closed."""


class WorkerDiedError(DistributedError):
    """A worker process exited while the group was serving; its requests fail with this."""
