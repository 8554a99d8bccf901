"""``omni serve``'s connection flags: how many connections at once and how long a client may
take (idle keep-alive, headers, body), documented in sdk-docs/docs/operations.md."""

from __future__ import annotations

import functools
from typing import Any

import click

from omni_core.serving.config import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEP_ALIVE_S,
    DEFAULT_MAX_CONNECTIONS,
)

_SECONDS = click.FloatRange(min=0, min_open=True)


def connection_options(func: Any) -> Any:
    """``--max-connections``, ``--keep-alive-timeout``, ``--header-timeout``,
    ``--body-timeout``; the command receives them as one ``connections`` keyword: the
    :class:`~omni_core.serving.config.ServerConfig` fields they set."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        max_connections: int,
        keep_alive_timeout: float,
        header_timeout: float,
        body_timeout: float,
        **kwargs: Any,
    ) -> Any:
        connections = {
            "max_connections": max_connections,
            "keep_alive_s": keep_alive_timeout,
            "header_timeout_s": header_timeout,
            "body_timeout_s": body_timeout,
        }
        return func(*args, connections=connections, **kwargs)

    options = [
        click.option(
            "--max-connections",
            type=click.IntRange(1),
            default=DEFAULT_MAX_CONNECTIONS,
            show_default=True,
            help="Open connections (and requests) at once; more get 503 at once.",
        ),
        click.option(
            "--keep-alive-timeout",
            type=_SECONDS,
            default=DEFAULT_KEEP_ALIVE_S,
            show_default=True,
            help="Seconds an idle keep-alive connection is kept open.",
        ),
        click.option(
            "--header-timeout",
            type=_SECONDS,
            default=DEFAULT_HEADER_TIMEOUT_S,
            show_default=True,
            help="Seconds from a connection's opening (or its last response) to the end of the "
            "next request's headers; slower clients are disconnected.",
        ),
        click.option(
            "--body-timeout",
            type=_SECONDS,
            default=DEFAULT_BODY_TIMEOUT_S,
            show_default=True,
            help="Seconds from the end of the headers to the end of the body; slower uploads "
            "are disconnected.",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
