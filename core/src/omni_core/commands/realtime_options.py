"""``omni serve``'s ``/v1/realtime`` flags: sessions at once and what one session may use
(documented in sdk-docs/docs/realtime.md)."""

from __future__ import annotations

import functools
from typing import Any

import click

_SECONDS = click.FloatRange(min=0, min_open=True)


def realtime_options(func: Any) -> Any:
    """``--realtime-max-sessions``, ``--realtime-max-duration``, ``--realtime-idle-timeout``,
    ``--realtime-max-audio-mb``, ``--realtime-max-turns``; the command receives them as one
    ``realtime`` keyword: the :class:`~omni_core.serving.config.ServerConfig` fields they set."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        realtime_max_sessions: int,
        realtime_max_duration: float,
        realtime_idle_timeout: float,
        realtime_max_audio_mb: float,
        realtime_max_turns: int,
        **kwargs: Any,
    ) -> Any:
        realtime = {
            "realtime_max_sessions": realtime_max_sessions,
            "realtime_max_s": realtime_max_duration,
            "realtime_idle_s": realtime_idle_timeout,
            "realtime_max_audio_bytes": int(realtime_max_audio_mb * 1024 * 1024),
            "realtime_max_turns": realtime_max_turns,
        }
        return func(*args, realtime=realtime, **kwargs)

    options = [
        click.option(
            "--realtime-max-sessions",
            type=click.IntRange(1),
            default=16,
            show_default=True,
            help="/v1/realtime sessions open at once; more get an error event and close.",
        ),
        click.option(
            "--realtime-max-duration",
            type=_SECONDS,
            default=1800.0,
            show_default=True,
            help="Seconds a /v1/realtime session may last.",
        ),
        click.option(
            "--realtime-idle-timeout",
            type=_SECONDS,
            default=120.0,
            show_default=True,
            help="Seconds a /v1/realtime session may go without a client event.",
        ),
        click.option(
            "--realtime-max-audio-mb",
            type=click.FloatRange(min=0.01),
            default=27.5,
            show_default=True,
            help="Input audio one /v1/realtime session may send (MB of 24 kHz PCM16: "
            "27.5 MB is 10 minutes).",
        ),
        click.option(
            "--realtime-max-turns",
            type=click.IntRange(1),
            default=200,
            show_default=True,
            help="User turns of one /v1/realtime session.",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
