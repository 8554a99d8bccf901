"""``omni serve``'s storage flags: where video jobs and outputs live (``--job-store``,
``--output-store``), how long they are kept (``--retention-age``, ``--retention-size``) and
the free space the state folder must keep (``--min-free-space``).

:func:`storage_options` adds the flags and hands the command one ``storage`` keyword, a
:class:`~omni_core.serving.stores.StorageConfig` (pydantic only: no driver is imported here).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import click

from omni_core.serving.stores.config import (
    DEFAULT_LEASE_S,
    DEFAULT_MIN_FREE_BYTES,
    DEFAULT_RETENTION_AGE_S,
    DEFAULT_RETENTION_BYTES,
    DEFAULT_SWEEP_INTERVAL_S,
)

_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_BYTES = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}
_BYTES.update({"ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4})


def parse_duration(text: str, flag: str) -> float | None:
    """``90``, ``30m``, ``12h``, ``7d``, ``2w`` -> seconds; ``0``/``off`` -> None (never)."""
    value = text.strip().lower()
    if value in ("0", "off", "none", "never"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", value)
    if not match:
        raise click.BadParameter(
            f"expected a duration like 3600, 30m, 12h or 7d (0: never), got {text!r}",
            param_hint=flag,
        )
    seconds = float(match.group(1)) * _SECONDS.get(match.group(2) or "s", 1)
    return seconds or None


def parse_size(text: str, flag: str) -> int | None:
    """``500MB``, ``20GB``, ``1.5TiB``, ``1048576`` -> bytes; ``0``/``off`` -> None (no cap)."""
    value = text.strip().lower()
    if value in ("0", "off", "none"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?", value)
    if not match:
        raise click.BadParameter(
            f"expected a size like 500MB, 20GB or 1TiB (0: no cap), got {text!r}", param_hint=flag
        )
    size = int(float(match.group(1)) * _BYTES[match.group(2) or ""])
    return size or None


def _check_store(url: str | None, flag: str, schemes: tuple[str, ...]) -> str | None:
    if not url:
        return None
    from omni_core.contract.errors import ConfigError
    from omni_core.serving.stores import check_url

    try:
        check_url(url, schemes, flag)
    except ConfigError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1], param_hint=flag) from None
    return url


def check_reachable(storage: Any) -> None:
    """Fail at start, in one line, when a shared store named by URL cannot be used (the
    database is down, the bucket is missing, a driver is not installed)."""
    from pathlib import Path

    from omni_core.contract.errors import ConfigError
    from omni_core.serving.stores import open_job_store, open_output_store

    if storage.job_store and not storage.job_store.startswith("sqlite"):
        try:
            open_job_store(storage.job_store, Path(".")).close()
        except OSError as exc:
            raise ConfigError(f"--job-store: {exc}") from None
    if storage.output_store and storage.output_store.startswith("s3"):
        try:
            outputs = open_output_store(storage.output_store, Path("."))
            outputs.check()
            outputs.close()
        except OSError as exc:
            raise ConfigError(f"--output-store: {exc}") from None


def storage_options(func: Any) -> Any:
    """Add the storage flags to ``func``; it receives ``storage`` (a ``StorageConfig``)."""
    from omni_core.serving.stores import JOB_STORE_SCHEMES, OUTPUT_STORE_SCHEMES

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from omni_core.serving.stores.config import RetentionPolicy, StorageConfig

        retention = RetentionPolicy(
            max_age_s=parse_duration(kwargs.pop("retention_age"), "--retention-age"),
            max_bytes=parse_size(kwargs.pop("retention_size"), "--retention-size"),
            interval_s=kwargs.pop("retention_interval"),
        )
        kwargs["storage"] = StorageConfig(
            job_store=_check_store(kwargs.pop("job_store"), "--job-store", JOB_STORE_SCHEMES),
            output_store=_check_store(
                kwargs.pop("output_store"), "--output-store", OUTPUT_STORE_SCHEMES
            ),
            lease_s=kwargs.pop("job_lease"),
            retention=retention,
            min_free_bytes=parse_size(kwargs.pop("min_free_space"), "--min-free-space") or 0,
        )
        check_reachable(kwargs["storage"])
        return func(*args, **kwargs)

    options = [
        click.option(
            "--job-store",
            envvar="OMNI_JOB_STORE",
            metavar="URL",
            help="Video-job records: sqlite:///PATH or postgresql://USER:PASS@HOST:PORT/DB "
            "(shared by several servers) [default: STATE_DIR/jobs.sqlite3; env: OMNI_JOB_STORE].",
        ),
        click.option(
            "--output-store",
            envvar="OMNI_OUTPUT_STORE",
            metavar="URL",
            help="Videos, inputs and images by URL: file:///PATH or s3://BUCKET/PREFIX"
            "[?endpoint_url=...] [default: STATE_DIR; env: OMNI_OUTPUT_STORE].",
        ),
        click.option(
            "--retention-age",
            default=f"{DEFAULT_RETENTION_AGE_S / 86400:g}d",
            show_default=True,
            metavar="DURATION",
            help="Finished jobs, their outputs and inputs, and images by URL expire after this "
            "(e.g. 12h, 7d; 0: never).",
        ),
        click.option(
            "--retention-size",
            default=f"{DEFAULT_RETENTION_BYTES / 1024**3:g}GiB",
            show_default=True,
            metavar="SIZE",
            help="Above this total in the output store the oldest outputs go first (e.g. 500MB; "
            "0: no cap).",
        ),
        click.option(
            "--retention-interval",
            type=click.FloatRange(min=1),
            default=DEFAULT_SWEEP_INTERVAL_S,
            show_default=True,
            metavar="SECONDS",
            help="Seconds between two retention sweeps.",
        ),
        click.option(
            "--job-lease",
            type=click.FloatRange(min=1),
            default=DEFAULT_LEASE_S,
            show_default=True,
            metavar="SECONDS",
            help="A server's hold on its jobs without renewal; after it, another server sharing "
            "the job store re-runs them.",
        ),
        click.option(
            "--min-free-space",
            default=f"{DEFAULT_MIN_FREE_BYTES / 1024**2:g}MiB",
            show_default=True,
            metavar="SIZE",
            help="Free space the state folder must keep: below it /health is 503 and the "
            "server does not start (0: any).",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
