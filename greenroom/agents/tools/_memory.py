"""``memory``: notes an agent keeps across sessions, in its own SQLite file (spec §2.3).

Default file: ``<data dir>/memory/<agent file name>-<8 hex of sha256(agent file path)>/memory.db``
(as upstream, under greenroom's data directory). A relative ``path`` option is resolved
against the working directory and must stay inside it. Every call opens the file in a worker
thread, does its statement and closes it, so no connection outlives a call.

The database is shared by every session of the agent file, so no tool of it is read-only:
reading asks as writing does (a permission rule can allow them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import trio

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import (
    FunctionTool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolsetError,
    error,
    schema,
    string,
)
from ._registry import Toolset, register

T = TypeVar("T")
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS memories (id TEXT PRIMARY KEY, created_at TEXT, memory TEXT, "
    "category TEXT DEFAULT '')"
)
INSTRUCTIONS = (
    "## Memory\n\n"
    "You have a persistent memory that outlives this conversation. Look in it with "
    "get_memories or search_memories before you ask the user for something you may have "
    "learned before; store lasting facts and preferences with add_memory."
)


def memory_path(config: ToolsetConfig, ctx: ToolContext) -> Path:
    given = config.options.get("path")
    if given is not None and not isinstance(given, str):
        raise ToolsetError("path must be a string")
    if given:
        path = Path(given)
        if path.is_absolute():
            return path
        base = Path(os.path.realpath(ctx.working_dir))
        resolved = Path(os.path.realpath(base / path))
        if resolved != base and base not in resolved.parents:
            raise ToolsetError(
                f"invalid memory database path: path outside allowed directory: {given}"
            )
        return resolved
    source = ctx.agent_file or ctx.agent_name or "agent"
    digest = hashlib.sha256(source.encode()).hexdigest()[:8]
    name = Path(source).stem or "agent"
    return ctx.data_dir / "memory" / f"{name}-{digest}" / "memory.db"


class Memories:
    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        conn = sqlite3.connect(self.path)
        try:
            conn.execute(SCHEMA)
            with conn:
                yield conn
        finally:
            conn.close()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def work() -> T:
            with self._db() as conn:
                return fn(conn)

        return await trio.to_thread.run_sync(work)

    @staticmethod
    def _rows(rows: list[tuple[str, str, str, str]]) -> str:
        if not rows:
            return "null"
        out = []
        for mid, created, memory, category in rows:
            item = {"id": mid, "created_at": created, "memory": memory}
            if category:
                item["category"] = category
            out.append(item)
        return json.dumps(out)

    async def add(self, args: Mapping[str, Any]) -> ToolResult:
        mid = str(time.time_ns())
        created = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        values = (mid, created, str(args["memory"]), str(args.get("category") or ""))
        try:
            await self._run(lambda c: c.execute("INSERT INTO memories VALUES (?, ?, ?, ?)", values))
        except sqlite3.Error as exc:
            return error(f"Error calling tool: failed to add memory: {exc}")
        return ToolResult(f"Memory added successfully with ID: {mid}")

    async def get(self, _: Mapping[str, Any]) -> ToolResult:
        try:
            rows = await self._run(lambda c: c.execute("SELECT * FROM memories").fetchall())
        except sqlite3.Error as exc:
            return error(f"Error calling tool: failed to get memories: {exc}")
        return ToolResult(self._rows(rows))

    async def delete(self, args: Mapping[str, Any]) -> ToolResult:
        mid = str(args["id"])
        try:
            await self._run(lambda c: c.execute("DELETE FROM memories WHERE id = ?", (mid,)))
        except sqlite3.Error as exc:
            return error(f"Error calling tool: failed to delete memory: {exc}")
        return ToolResult(f"Memory with ID {mid} deleted successfully")

    async def search(self, args: Mapping[str, Any]) -> ToolResult:
        clauses, params = [], []
        for word in str(args.get("query") or "").split():
            escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("memory LIKE ? ESCAPE '\\'")  # LIKE is case-insensitive for ASCII
            params.append(f"%{escaped}%")
        category = str(args.get("category") or "")
        if category:
            clauses.append("LOWER(category) = LOWER(?)")
            params.append(category)
        sql = "SELECT * FROM memories" + (" WHERE " + " AND ".join(clauses) if clauses else "")
        try:
            rows = await self._run(lambda c: c.execute(sql, params).fetchall())
        except sqlite3.Error as exc:
            return error(f"Error calling tool: failed to search memories: {exc}")
        return ToolResult(self._rows(rows))

    async def update(self, args: Mapping[str, Any]) -> ToolResult:
        mid = str(args["id"])
        values = (str(args["memory"]), str(args.get("category") or ""), mid)
        try:
            changed = await self._run(
                lambda c: (
                    c.execute(
                        "UPDATE memories SET memory = ?, category = ? WHERE id = ?", values
                    ).rowcount
                )
            )
        except sqlite3.Error as exc:
            return error(f"Error calling tool: failed to update memory: {exc}")
        if not changed:
            return error(f"Error calling tool: failed to update memory: memory not found: {mid}")
        return ToolResult(f"Memory with ID {mid} updated successfully")


_ID = string("The memory's ID")
_CATEGORY = string("An optional category")


@register("memory")
def memory_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    store = Memories(memory_path(config, ctx))
    # Every session of the agent file shares the database: reading shows what other sessions
    # (other users, perhaps) stored, so reads ask like writes (issue 23); an agent file or a
    # session that wants them free says so: ``permissions: allow: [get_memories, ...]``.
    ask = ToolAnnotations()
    auto = ToolAnnotations(title="Read shared memories")
    memory = string("The text to remember")
    with_category = {"memory": memory, "category": _CATEGORY}
    search = {"query": string("Words that must all occur"), "category": _CATEGORY}
    specs = [
        ("add_memory", "Add a new memory.", schema(with_category, ("memory",)), store.add, ask),
        ("get_memories", "Get all memories.", schema({}), store.get, auto),
        ("delete_memory", "Delete a memory.", schema({"id": _ID}, ("id",)), store.delete, ask),
        ("search_memories", "Search memories.", schema(search), store.search, auto),
        (
            "update_memory",
            "Replace a memory's text and category.",
            schema({"id": _ID, **with_category}, ("id", "memory")),
            store.update,
            ask,
        ),
    ]
    tools = [FunctionTool(ToolSpec(n, d, p), fn, a, "memory") for n, d, p, fn, a in specs]
    return Toolset(list(tools), INSTRUCTIONS)
