"""The shared job store: PostgreSQL (``--job-store postgresql://USER:PASS@HOST:PORT/DB``), for
several ``omni serve`` processes or Ray Serve replicas on one or many hosts.

The driver is pg8000 (pure Python, BSD-3-Clause: ``pip install 'omni-core[postgres]'``).
Claims lock the rows they take with ``SELECT ... FOR UPDATE SKIP LOCKED``, so servers claiming
at once get distinct jobs without waiting for each other; schema migrations run under an
advisory lock, so servers starting together migrate once. A unix socket: ``?host=/run/dir``.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from omni_core.contract.errors import ConfigError
from omni_core.serving.stores.sql import Execute, SQLJobStore

#: pg_advisory_xact_lock key of the schema migrations ("omni" in ASCII).
_MIGRATION_LOCK = 0x6F6D6E69


class StoreUnavailableError(OSError):
    """The database cannot be reached (the request gets 503 ``storage_unavailable``)."""


def connect_kwargs(url: str) -> dict[str, Any]:
    """``postgresql://`` URL -> pg8000's ``connect`` keywords (ConfigError when malformed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"--job-store: not a postgresql:// URL: {parts.scheme}://")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        port = parts.port or int(query.get("port", 5432))
    except ValueError:
        raise ConfigError("--job-store: the port is not a number") from None
    kwargs: dict[str, Any] = {
        "user": unquote(parts.username or query.get("user", "postgres")),
        "password": unquote(parts.password) if parts.password else query.get("password"),
        "database": unquote(parts.path.lstrip("/")) or None,
        "port": port,
        "application_name": "omni",
        "timeout": float(query.get("connect_timeout", 10)),
    }
    socket_dir = query.get("host")
    if socket_dir and socket_dir.startswith("/"):
        kwargs["unix_sock"] = f"{socket_dir.rstrip('/')}/.s.PGSQL.{port}"
    else:
        kwargs["host"] = socket_dir or parts.hostname or "localhost"
    if query.get("sslmode") in ("require", "verify-ca", "verify-full"):
        context = ssl.create_default_context()
        if query["sslmode"] == "require":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        kwargs["ssl_context"] = context
    return kwargs


class PostgresJobStore(SQLJobStore):
    """A :class:`~omni_core.serving.stores.base.JobStore` in a PostgreSQL database."""

    scheme = "postgresql"
    int_type = "BIGINT"
    lock_rows = " FOR UPDATE SKIP LOCKED"

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import pg8000.dbapi  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--job-store postgresql://... needs pg8000: pip install 'omni-core[postgres]'"
            ) from None
        self._kwargs = connect_kwargs(url)
        self._where = f"{self._kwargs.get('host') or self._kwargs.get('unix_sock')}"
        self._conn: Any = None
        self.migrate()

    def _connection(self) -> Any:
        import pg8000.dbapi

        if self._conn is None:
            try:
                self._conn = pg8000.dbapi.connect(**self._kwargs)
            except (OSError, pg8000.dbapi.InterfaceError) as exc:
                raise StoreUnavailableError(f"the job database cannot be reached: {exc}") from None
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[Execute]:
        import pg8000.dbapi

        with self._lock:
            conn = self._connection()
            cursor = conn.cursor()

            def execute(sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                cursor.execute(sql.replace("?", "%s"), args)
                return [tuple(row) for row in cursor.fetchall()] if cursor.description else []

            try:
                yield execute
                conn.commit()
            except (pg8000.dbapi.InterfaceError, OSError) as exc:
                self._drop()  # the connection broke: the next call connects again
                raise StoreUnavailableError(f"the job database failed: {exc}") from None
            except BaseException:
                try:
                    conn.rollback()
                except Exception:  # noqa: BLE001 - the connection may be gone too
                    self._drop()
                raise

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def _schema_version(self, execute: Execute) -> int:
        execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
        return super()._schema_version(execute)

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __repr__(self) -> str:
        return f"PostgresJobStore({self._where!r}, database={self._kwargs.get('database')!r})"
