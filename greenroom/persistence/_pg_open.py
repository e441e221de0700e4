"""Opening greenroom's PostgreSQL database: connections with greenroom's settings, numbered
migrations under an advisory lock, and errors that name the server and what to do."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from greenroom.errors import DatabaseError

from . import _migrations

# Any fixed key: every node migrating the same database takes the same transaction lock.
_MIGRATION_LOCK = 0x67726D31
# Bounds on what one statement, one lock wait and an idle transaction may take: a stuck server
# or a forgotten transaction fails a request instead of hanging it (or holding locks).
SETTINGS = {
    "statement_timeout": "30s",
    "lock_timeout": "10s",
    "idle_in_transaction_session_timeout": "5s",
}


def options(lease_ttl: float | None = None) -> str:
    """The connection's ``-c`` settings. A node's statements and idle transactions end within
    its lease (``lease_ttl``): once the lease has run out, another node takes the sessions over,
    and its claim would wait on every row lock a paused or cut-off node's transaction still held
    (a COPY waiting for data is bounded by the statement timeout alone)."""
    settings = dict(SETTINGS)
    if lease_ttl:
        for name, default in (
            ("statement_timeout", 30.0),
            ("idle_in_transaction_session_timeout", 5.0),
        ):
            settings[name] = f"{round(min(default, lease_ttl) * 1000)}ms"
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


def migrations() -> list[_migrations.Migration]:
    """(version, name, sql) of every bundled PostgreSQL migration, in order."""
    return _migrations.bundled("greenroom.persistence.pg_migrations")


def describe(dsn: str) -> str:
    """``database "x" on host:port`` of a DSN, never its password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the PostgreSQL database of --db (the URL does not parse)"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    dbname = params.get("dbname") or params.get("user") or "(default)"
    return f'PostgreSQL database "{dbname}" on {host}:{port}'


def connection_kwargs(role: str, node_id: str, lease_ttl: float | None = None) -> dict[str, Any]:
    """What every connection of the store is opened with (``role`` shows in pg_stat_activity)."""
    return {
        "autocommit": True,
        "options": options(lease_ttl),
        "application_name": f"greenroom {role} {node_id}"[:63],
        "connect_timeout": 10,
    }


def connect(
    dsn: str, role: str, node_id: str, lease_ttl: float | None = None
) -> psycopg.Connection[Any]:
    """A connection in autocommit mode: transactions are explicit (``conn.transaction()``)."""
    return psycopg.connect(dsn, **connection_kwargs(role, node_id, lease_ttl))


def _redact(text: str, dsn: str) -> str:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        password = None
    return text.replace(str(password), "***") if password else text


def explain(dsn: str, exc: Exception) -> DatabaseError:
    """A DatabaseError for a failed connect: which server, why, and what to do."""
    reason = _redact(str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc), dsn)
    return DatabaseError(
        f"cannot connect to the {describe(dsn)}: {reason}; check that the server runs and "
        "accepts connections, and the host, port, database name and user in the --db URL"
    )


def open_and_migrate(
    dsn: str, node_id: str, lease_ttl: float | None = None
) -> psycopg.Connection[Any]:
    """Connect (the writer connection) and bring the schema up to date; several nodes may do
    this at once: the advisory lock lets one migrate while the others wait, then find it done."""
    try:
        conn = connect(dsn, "writer", node_id, lease_ttl)
    except psycopg.Error as exc:
        raise explain(dsn, exc) from None
    try:
        migrate(conn, dsn)
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(conn: psycopg.Connection[Any], dsn: str) -> None:
    def apply(migration: _migrations.Migration) -> None:
        version, name, sql = migration
        conn.execute(sql.encode())
        conn.execute(
            "INSERT INTO gr_schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
            (version, name, dt.datetime.now(dt.UTC)),
        )

    with conn.transaction():
        # No lease is held yet, and a migration of a big database may take its time.
        conn.execute("SET LOCAL statement_timeout = 0")
        conn.execute("SET LOCAL lock_timeout = 0")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS gr_schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL)"
        )
        applied = {r[0] for r in conn.execute("SELECT version FROM gr_schema_migrations")}
        _migrations.run(
            migrations(),
            applied,
            apply,
            where=f"the {describe(dsn)}",
            instead="choose another database",
        )
