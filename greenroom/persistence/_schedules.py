"""Scheduled runs on record: each schedule with its next occurrence, and the compare-and-set that
lets exactly one node of a cluster fire an occurrence (decision 0028).

Times are wall-clock seconds since the epoch (UTC). ``next_fire`` is a whole second: the
occurrence a node claims with :meth:`ScheduleStore.claim_occurrence`, which moves it to the
next one only if nobody moved it first (``UPDATE ... WHERE next_fire = :due``), so of several
nodes that saw the same occurrence due, one wins and the others change nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import attrs

from greenroom.errors import ScheduleNotFound

T = TypeVar("T")


@attrs.frozen
class Schedule:
    id: str
    cron: str
    timezone: str  # an IANA zone: the cron's fields are that zone's wall-clock time
    agent: str  # the agent source (as sessions name it: decision 0019)
    agent_name: str  # "" is the source's default agent
    message: str  # the user message each occurrence runs
    session_id: str  # "" : a new session each time; else this session (a follow-up if busy)
    title: str
    paused: bool
    next_fire: int  # the next occurrence (epoch seconds); the claim's compare-and-set value
    created_at: float
    fires: int = 0  # occurrences claimed so far
    last_occurrence: int | None = None  # the occurrence last fired
    last_fired_at: float | None = None  # when it was started
    last_session_id: str = ""  # the session it ran in
    last_error: str = ""  # why the last firing failed ("" : it started)


class ScheduleStore(Protocol):
    async def add_schedule(self, schedule: Schedule) -> None: ...

    async def get_schedule(self, schedule_id: str) -> Schedule:
        """Raises ScheduleNotFound."""

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, oldest first."""

    async def set_paused(
        self, schedule_id: str, paused: bool, next_fire: int | None = None
    ) -> Schedule:
        """Pause or resume (at ``next_fire``; None keeps it); ScheduleNotFound."""

    async def delete_schedule(self, schedule_id: str) -> None:
        """Raises ScheduleNotFound."""

    async def due_schedules(self, now: float) -> list[Schedule]:
        """The schedules not paused whose next occurrence is at or before ``now``."""

    async def next_due(self) -> int | None:
        """The earliest next occurrence of a schedule not paused (None: there is none)."""

    async def claim_occurrence(self, schedule_id: str, due: int, next_fire: int) -> bool:
        """Move ``next_fire`` from ``due`` to ``next_fire`` and count the firing, only if the
        schedule is not paused and ``due`` is still its next occurrence: True for exactly one
        caller of the same occurrence, whichever node it runs on."""

    async def record_fire(
        self, schedule_id: str, fired_at: float, session_id: str, error: str
    ) -> None:
        """Note how the claimed occurrence went (a schedule deleted meanwhile: nothing)."""


_COLUMNS = (
    "id, cron, timezone, agent, agent_name, message, session_id, title, paused, next_fire,"
    " created_at, fires, last_occurrence, last_fired_at, last_session_id, last_error"
)
_INSERT = f"INSERT INTO schedules ({_COLUMNS}) VALUES ({', '.join('?' * 16)})"
_SELECT = f"SELECT {_COLUMNS} FROM schedules"
_PAUSE = "UPDATE schedules SET paused = ?, next_fire = COALESCE(?, next_fire) WHERE id = ?"
_DELETE = "DELETE FROM schedules WHERE id = ?"
_DUE = f"{_SELECT} WHERE paused = ? AND next_fire <= ? ORDER BY next_fire, id"
_NEXT = "SELECT MIN(next_fire) FROM schedules WHERE paused = ?"
_CLAIM = (
    "UPDATE schedules SET next_fire = ?, last_occurrence = ?, fires = fires + 1"
    " WHERE id = ? AND next_fire = ? AND paused = ?"
)
_RECORD = "UPDATE schedules SET last_fired_at = ?, last_session_id = ?, last_error = ? WHERE id = ?"


def _row(row: Any) -> Schedule:
    (id_, cron, zone, agent, name, message, session, title, paused, next_fire, created) = row[:11]
    fires, occurrence, fired_at, last_session, error = row[11:]
    return Schedule(
        str(id_),
        str(cron),
        str(zone),
        str(agent),
        str(name),
        str(message),
        str(session),
        str(title),
        bool(paused),
        int(next_fire),
        float(created),
        int(fires),
        None if occurrence is None else int(occurrence),
        None if fired_at is None else float(fired_at),
        str(last_session),
        str(error),
    )


class SqlSchedules:
    """:class:`ScheduleStore` for a SQL store: writes through its group-commit writer (their
    row counts are the compare-and-set's answer), reads on its readers."""

    _placeholder = "?"  # PostgreSQL: %s
    group_commit: Any

    async def _read(self, fn: Callable[[Any], T], *, transaction: bool = False) -> T:
        raise NotImplementedError

    def _schedule_sql(self, text: str) -> str:
        return text.replace("?", self._placeholder)

    @property
    def schedules(self) -> ScheduleStore:
        return self

    async def _write_count(self, text: str, args: tuple[Any, ...]) -> int:
        sql = self._schedule_sql(text)
        count: int = await self.group_commit.write(lambda conn: conn.execute(sql, args).rowcount)
        return count

    async def _select(self, text: str, args: tuple[Any, ...]) -> list[Schedule]:
        sql = self._schedule_sql(text)
        rows = await self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [_row(r) for r in rows]

    async def add_schedule(self, schedule: Schedule) -> None:
        await self._write_count(_INSERT, attrs.astuple(schedule))

    async def get_schedule(self, schedule_id: str) -> Schedule:
        found = await self._select(f"{_SELECT} WHERE id = ?", (schedule_id,))
        if not found:
            raise ScheduleNotFound(f"no schedule {schedule_id!r}")
        return found[0]

    async def list_schedules(self) -> list[Schedule]:
        return await self._select(f"{_SELECT} ORDER BY created_at, id", ())

    async def set_paused(
        self, schedule_id: str, paused: bool, next_fire: int | None = None
    ) -> Schedule:
        if not await self._write_count(_PAUSE, (paused, next_fire, schedule_id)):
            raise ScheduleNotFound(f"no schedule {schedule_id!r}")
        return await self.get_schedule(schedule_id)

    async def delete_schedule(self, schedule_id: str) -> None:
        if not await self._write_count(_DELETE, (schedule_id,)):
            raise ScheduleNotFound(f"no schedule {schedule_id!r}")

    async def due_schedules(self, now: float) -> list[Schedule]:
        return await self._select(_DUE, (False, int(now)))

    async def next_due(self) -> int | None:
        sql = self._schedule_sql(_NEXT)
        row = await self._read(lambda conn: conn.execute(sql, (False,)).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    async def claim_occurrence(self, schedule_id: str, due: int, next_fire: int) -> bool:
        args = (next_fire, due, schedule_id, due, False)
        return await self._write_count(_CLAIM, args) == 1

    async def record_fire(
        self, schedule_id: str, fired_at: float, session_id: str, error: str
    ) -> None:
        await self._write_count(_RECORD, (fired_at, session_id, error, schedule_id))


class MemorySchedules:
    """:class:`ScheduleStore` in a dict (the store's ``__init__`` sets ``_schedules = {}``)."""

    _schedules: dict[str, Schedule]

    @property
    def schedules(self) -> ScheduleStore:
        return self

    def _schedule(self, schedule_id: str) -> Schedule:
        try:
            return self._schedules[schedule_id]
        except KeyError:
            raise ScheduleNotFound(f"no schedule {schedule_id!r}") from None

    async def add_schedule(self, schedule: Schedule) -> None:
        self._schedules[schedule.id] = schedule

    async def get_schedule(self, schedule_id: str) -> Schedule:
        return self._schedule(schedule_id)

    async def list_schedules(self) -> list[Schedule]:
        return sorted(self._schedules.values(), key=lambda s: (s.created_at, s.id))

    async def set_paused(
        self, schedule_id: str, paused: bool, next_fire: int | None = None
    ) -> Schedule:
        found = self._schedule(schedule_id)
        changed = attrs.evolve(found, paused=paused, next_fire=next_fire or found.next_fire)
        self._schedules[schedule_id] = changed
        return changed

    async def delete_schedule(self, schedule_id: str) -> None:
        self._schedule(schedule_id)
        del self._schedules[schedule_id]

    async def due_schedules(self, now: float) -> list[Schedule]:
        due = [s for s in self._schedules.values() if not s.paused and s.next_fire <= int(now)]
        return sorted(due, key=lambda s: (s.next_fire, s.id))

    async def next_due(self) -> int | None:
        return min((s.next_fire for s in self._schedules.values() if not s.paused), default=None)

    async def claim_occurrence(self, schedule_id: str, due: int, next_fire: int) -> bool:
        found = self._schedules.get(schedule_id)
        if found is None or found.paused or found.next_fire != due:
            return False
        self._schedules[schedule_id] = attrs.evolve(
            found, next_fire=next_fire, last_occurrence=due, fires=found.fires + 1
        )
        return True

    async def record_fire(
        self, schedule_id: str, fired_at: float, session_id: str, error: str
    ) -> None:
        found = self._schedules.get(schedule_id)
        if found is not None:
            self._schedules[schedule_id] = attrs.evolve(
                found, last_fired_at=fired_at, last_session_id=session_id, last_error=error
            )
