"""The store ``--db`` names: in memory, an SQLite file, or a PostgreSQL database shared by the
nodes of a cluster."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from greenroom.errors import ConfigError
from greenroom.persistence import Persistence, open_memory_store, open_sqlite_store

from ._config import default_db_path


@asynccontextmanager
async def open_store(
    db: str, *, node_id: str = "", advertise_url: str = "", lease_ttl: float = 10.0
) -> AsyncIterator[Persistence]:
    """The persistence ``db`` names: ``:memory:``, a ``postgresql://`` (or ``postgres://``)
    URL (a cluster node: ``node_id`` defaults to the host name), else an SQLite file."""
    if db.startswith(("postgresql://", "postgres://")):
        from greenroom.persistence.postgres import open_postgres_store  # psycopg: only if used

        async with open_postgres_store(
            db,
            node_id=node_id or socket.gethostname(),
            advertise_url=advertise_url,
            lease_ttl=lease_ttl,
        ) as postgres:
            yield postgres
        return
    if db == ":memory:":
        async with open_memory_store() as memory:
            yield memory
        return
    path = Path(db) if db else default_db_path()
    try:
        await trio.to_thread.run_sync(lambda: path.parent.mkdir(parents=True, exist_ok=True))
    except OSError as exc:
        raise ConfigError(
            f"cannot create the database directory {path.parent}: {exc.strerror or exc} "
            "(choose another file with --db PATH, or --db :memory:)"
        ) from None
    async with open_sqlite_store(path) as sqlite:
        yield sqlite
