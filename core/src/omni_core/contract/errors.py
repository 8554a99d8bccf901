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


# -- what a request the engine accepted can end with ------------------------------


class EngineError(OmniError):
    """A request could not be completed by the engine; ``code`` says why."""

    code = "engine_error"


class QueueFullError(EngineError):
    """The model's queue is full: retry after ``retry_after`` seconds."""

    code = "queue_full"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EngineStoppedError(EngineError):
    """The engine is shutting down and takes no new work."""

    code = "server_shutting_down"


class RequestCancelledError(EngineError):
    code = "cancelled"


class RequestTimeoutError(EngineError):
    code = "timeout"


class RequestFailedError(EngineError):
    """The pipeline raised while serving this request (out of memory included)."""

    code = "generation_failed"


class RequestOutOfMemoryError(RequestFailedError):
    """This request ran out of host or device memory; it failed alone (the server answers 503:
    retry smaller, or lower the server's ``--max-pixels``/``--max-frames``/``--max-batch``)."""

    code = "out_of_memory"
