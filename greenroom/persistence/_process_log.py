"""The process groups tool calls started, on record so a restart can end what a crash left.

A tool process runs in a process group of its own (``agents/tools/_process.py``). Its group is
recorded when it starts and forgotten once the group is empty; a record still there at start
names a group the last server left behind. ``host`` says where the group runs (host name and
boot id: a pgid means nothing on another machine or after a reboot) and ``start_ticks`` when
its leader started (a pid reused since is a different process).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import attrs

T = TypeVar("T")


@attrs.frozen
class ProcessRecord:
    host: str
    pgid: int
    start_ticks: int  # the leader's start time, in clock ticks after boot (/proc/PID/stat)
    started_at: float  # wall clock, seconds
    label: str = ""  # what started it: the tool's name


class ProcessLog(Protocol):
    async def record_process(self, record: ProcessRecord) -> None:
        """Keep ``record`` (a record of the same host and pgid is replaced)."""

    async def forget_process(self, host: str, pgid: int) -> None:
        """Drop the record of ``pgid`` on ``host`` (none: nothing happens)."""

    async def recorded_processes(self, host: str) -> list[ProcessRecord]:
        """Every record of ``host``, oldest first."""


_UPSERT = (
    "INSERT INTO tool_processes (host, pgid, start_ticks, started_at, label)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (host, pgid) DO UPDATE SET"
    " start_ticks = excluded.start_ticks, started_at = excluded.started_at,"
    " label = excluded.label"
)
_DELETE = "DELETE FROM tool_processes WHERE host = ? AND pgid = ?"
_SELECT = (
    "SELECT host, pgid, start_ticks, started_at, label FROM tool_processes"
    " WHERE host = ? ORDER BY started_at, pgid"
)


class SqlProcessLog:
    """:class:`ProcessLog` for a SQL store: writes through its group-commit writer."""

    _placeholder = "?"  # PostgreSQL: %s
    group_commit: Any

    async def _read(self, fn: Callable[[Any], T], *, transaction: bool = False) -> T:
        raise NotImplementedError

    def _process_sql(self, text: str) -> str:
        return text.replace("?", self._placeholder)

    @property
    def process_log(self) -> ProcessLog:
        return self

    async def record_process(self, record: ProcessRecord) -> None:
        sql = self._process_sql(_UPSERT)
        args = (record.host, record.pgid, record.start_ticks, record.started_at, record.label)
        await self.group_commit.write(lambda conn: conn.execute(sql, args) and None)

    async def forget_process(self, host: str, pgid: int) -> None:
        sql = self._process_sql(_DELETE)
        await self.group_commit.write(lambda conn: conn.execute(sql, (host, pgid)) and None)

    async def recorded_processes(self, host: str) -> list[ProcessRecord]:
        sql = self._process_sql(_SELECT)
        rows = await self._read(lambda conn: conn.execute(sql, (host,)).fetchall())
        return [ProcessRecord(str(h), int(p), int(t), float(s), str(n)) for h, p, t, s, n in rows]


class MemoryProcessLog:
    """:class:`ProcessLog` in a dict (the store's ``__init__`` sets ``_processes = {}``)."""

    _processes: dict[tuple[str, int], ProcessRecord]

    @property
    def process_log(self) -> ProcessLog:
        return self

    async def record_process(self, record: ProcessRecord) -> None:
        self._processes.pop((record.host, record.pgid), None)
        self._processes[record.host, record.pgid] = record

    async def forget_process(self, host: str, pgid: int) -> None:
        self._processes.pop((host, pgid), None)

    async def recorded_processes(self, host: str) -> list[ProcessRecord]:
        found = [r for r in self._processes.values() if r.host == host]
        return sorted(found, key=lambda r: (r.started_at, r.pgid))
