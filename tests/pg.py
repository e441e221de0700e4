"""PostgreSQL for tests: a fresh database per test on the local server, dropped afterwards.

The server is ``GREENROOM_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432``).
Without a reachable server the PostgreSQL tests skip, unless ``GREENROOM_REQUIRE_POSTGRES=1``
(CI), where they fail instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
import trio

from greenroom.persistence.postgres import PostgresStore, open_postgres_store

SERVER = os.environ.get("GREENROOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
REQUIRED = os.environ.get("GREENROOM_REQUIRE_POSTGRES") == "1"
_reachable: bool | None = None


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=3)


def _check() -> None:
    global _reachable
    if _reachable is None:
        try:
            _admin().close()
            _reachable = True
        except psycopg.OperationalError as exc:
            _reachable = False
            if REQUIRED:
                pytest.fail(f"PostgreSQL at {SERVER} is required and unreachable: {exc}")
    if not _reachable:
        pytest.skip(f"PostgreSQL at {SERVER} is unreachable (GREENROOM_REQUIRE_POSTGRES=1 fails)")


def _create() -> str:
    name = f"gr_t_{secrets.token_hex(6)}"
    with _admin() as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return name


def _drop(name: str) -> None:
    with _admin() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def sql(dsn: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run ``query`` on its own connection (blocking: call it through trio.to_thread)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(query.encode() if not params else query, params or None)
        return cursor.fetchall() if cursor.description else []


async def run_sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return await trio.to_thread.run_sync(sql, dsn, query, params)


@asynccontextmanager
async def database() -> AsyncIterator[str]:
    """The DSN of a new, empty database, dropped (with its connections) after the block."""
    _check()
    name = await trio.to_thread.run_sync(_create)
    try:
        yield f"{SERVER}/{name}"
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_drop, name)


@asynccontextmanager
async def node(
    dsn: str, node_id: str = "n1", *, lease_ttl: float = 10.0, join: bool = True
) -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store on ``dsn`` as node ``node_id``, joined unless ``join`` is False."""
    async with open_postgres_store(
        dsn, node_id=node_id, advertise_url=f"http://{node_id}.test", lease_ttl=lease_ttl
    ) as store:
        if join:
            await store.membership.join()
        yield store


@asynccontextmanager
async def postgres_store() -> AsyncIterator[PostgresStore]:
    """A joined node on a fresh database: the ``postgres`` kind of the contract suites."""
    async with database() as dsn, node(dsn) as store:
        yield store
