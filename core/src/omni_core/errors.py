"""Exceptions with messages meant for users: the CLI prints them on one line and exits non-zero."""

from __future__ import annotations


class OmniError(Exception):
    """Base class of every error omni raises on purpose."""

    #: Process exit code the CLI uses for this error.
    exit_code = 1


class PluginError(OmniError):
    """A plugin is broken: it failed to import, uses an unknown hook or another plugin API."""


class RegistrationError(PluginError):
    """A spec was rejected (invalid, or a name registered twice without ``overrides=True``)."""


class PlatformError(OmniError):
    """The requested platform is unknown or not available on this machine."""


class ConfigError(OmniError):
    """A configuration value is invalid; the message names the field."""

    exit_code = 2


class InvalidRequestError(OmniError):
    """A request cannot be served as given; raised before any compute.

    ``param`` names the offending field, as OpenAI-style error bodies do.
    """

    exit_code = 2

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class ModelNotFoundError(OmniError):
    """No installed pipeline serves a checkpoint, or the checkpoint cannot be found."""

    exit_code = 2
