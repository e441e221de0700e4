"""Scheduled runs (decision 0028): the schedules' operations and the one task that fires them.

The task sleeps on trio's clock until the earliest next occurrence on record (or until a
schedule changes here: :meth:`Scheduler.changed`; on a cluster also every ``poll`` seconds,
since other nodes change schedules too). Woken, it reads the due schedules, and for each one
*claims* the occurrence in the store (the compare-and-set that moves ``next_fire`` on) before
starting it: of several nodes that saw it due, exactly one fires it. The next occurrence is
the first one after *now*, so the occurrences missed while no node ran fire once, at start.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime

import attrs
import trio

from greenroom.agents import QueuedMessage
from greenroom.domain import ChatMessage, Session
from greenroom.errors import (
    GreenroomError,
    InvalidRequest,
    OwnedElsewhere,
    SessionBusy,
    SessionNotFound,
)
from greenroom.persistence import Schedule, ScheduleStore

from ._cron import check_cron, next_occurrence, zone
from ._registry import Registry

log = logging.getLogger("greenroom.schedules")

Clock = Callable[[], float]
"""Wall-clock seconds since the epoch (``time.time``; a test passes one on trio's clock)."""

RemoteFire = Callable[[Schedule, OwnedElsewhere], Awaitable[str | None]]
"""Fires an occurrence into a session another node owns (a cluster): the session's id, or None
when its owner is gone (the occurrence then starts here)."""

_LONGEST_SLEEP = 60.0  # a wall clock that jumps is noticed within this (single node too)
_FIRING = 16  # occurrences starting at once at most


@attrs.frozen
class ScheduleSpec:
    """What ``POST /api/schedules`` asks for (checked by :meth:`Scheduler.create`)."""

    cron: str
    timezone: str
    agent: str
    message: str
    agent_name: str = ""
    session_id: str = ""  # "" : a new session each time
    title: str = ""


class Scheduler:
    """The schedules of one server (or cluster node) over its store and registry."""

    def __init__(
        self,
        registry: Registry,
        schedules: ScheduleStore,
        *,
        clock: Clock = time.time,
        poll: float | None = None,
        remote: RemoteFire | None = None,
    ) -> None:
        self.registry = registry
        self.store = schedules
        self.clock = clock
        self.poll = poll  # a cluster: other nodes change schedules too
        self.remote = remote
        self._wake = trio.Event()
        self._firing = trio.CapacityLimiter(_FIRING)
        self.rounds = 0  # wake-ups that read the due schedules (tests wait on it)
        self._round_done = trio.Event()

    def changed(self) -> None:
        """A schedule changed here: re-evaluate the next wake-up now."""
        self._wake.set()

    # --- the operations ------------------------------------------------------------------------

    async def create(self, spec: ScheduleSpec) -> Schedule:
        """A new schedule; InvalidRequest naming the field (``$.cron``, ``$.timezone``,
        ``$.message``, ``$.session_id``). The agent is the caller's to check."""
        if not spec.message.strip():
            raise InvalidRequest("$.message: a message is required", path="$.message")
        now = self.clock()
        first = check_cron(spec.cron, spec.timezone, now)
        if spec.session_id:
            try:
                await self.registry.get(spec.session_id)
            except SessionNotFound:
                raise InvalidRequest(
                    f"$.session_id: no session {spec.session_id!r}", path="$.session_id"
                ) from None
            except OwnedElsewhere:
                pass  # it exists: another node owns it
        schedule = Schedule(
            id=str(uuid.uuid4()),
            cron=spec.cron.strip(),
            timezone=spec.timezone,
            agent=spec.agent,
            agent_name=spec.agent_name,
            message=spec.message,
            session_id=spec.session_id,
            title=spec.title.strip(),
            paused=False,
            next_fire=first,
            created_at=now,
        )
        await self.store.add_schedule(schedule)
        self.changed()
        return schedule

    async def get(self, schedule_id: str) -> Schedule:
        return await self.store.get_schedule(schedule_id)

    async def list(self) -> list[Schedule]:
        return await self.store.list_schedules()

    async def pause(self, schedule_id: str) -> Schedule:
        paused = await self.store.set_paused(schedule_id, True)  # no claim succeeds from now
        self.changed()
        return paused

    async def resume(self, schedule_id: str) -> Schedule:
        """Goes on at the first occurrence after now (what was missed while paused is not
        fired)."""
        found = await self.store.get_schedule(schedule_id)
        if not found.paused:
            return found
        nxt = next_occurrence(found.cron, found.timezone, self.clock())
        resumed = await self.store.set_paused(schedule_id, False, nxt)
        self.changed()
        return resumed

    async def delete(self, schedule_id: str) -> None:
        await self.store.delete_schedule(schedule_id)
        self.changed()

    # --- the task ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fire due occurrences until cancelled (a failing store read is logged and retried)."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                self._wake = trio.Event()
                try:
                    await self._fire_due(nursery)
                    soonest = await self.store.next_due()
                except GreenroomError:
                    log.exception("schedules: reading the due schedules failed")
                    soonest = None
                    delay = self.poll or 1.0
                else:
                    delay = self._delay(soonest)
                self.rounds += 1
                self._round_done.set()
                self._round_done = trio.Event()
                with trio.move_on_after(delay):
                    await self._wake.wait()

    async def wait_round(self) -> None:
        """Until the task has read the due schedules once more (tests)."""
        await self._round_done.wait()

    def _delay(self, soonest: int | None) -> float:
        limit = self.poll if self.poll is not None else math.inf
        if soonest is None:
            return limit
        return max(0.0, min(soonest - self.clock(), limit, _LONGEST_SLEEP))

    async def _fire_due(self, nursery: trio.Nursery) -> None:
        if self.registry.fenced:  # a fenced cluster node starts nothing: others fire
            return
        now = self.clock()
        for schedule in await self.store.due_schedules(now):
            try:
                nxt = next_occurrence(schedule.cron, schedule.timezone, now)
            except (InvalidRequest, ValueError) as exc:  # a zone gone from this system's tzdata
                # Paused, with why: left due, it would be due again at once, round after round.
                log.error("schedule %s cannot fire, paused: %s", schedule.id, exc)
                await self.store.set_paused(schedule.id, True)
                await self.store.record_fire(schedule.id, now, "", f"cannot fire: {exc}")
                continue
            if await self.store.claim_occurrence(schedule.id, schedule.next_fire, nxt):
                nursery.start_soon(self._fire, schedule)

    async def _fire(self, schedule: Schedule) -> None:
        """Start the claimed occurrence; its outcome on the schedule."""
        async with self._firing:
            fired_at = self.clock()
            session_id, error = schedule.session_id, ""
            log.info("schedule %s: firing the occurrence of %s", schedule.id, _local(schedule))
            try:
                if not schedule.session_id:  # its id is kept even if the run cannot start
                    session_id = await self._new_session(schedule)
                    await self._run(session_id, schedule)
                else:
                    session_id = await self._into_session(schedule)
            except GreenroomError as exc:
                error = f"{exc.code}: {exc.message}"
                log.warning("schedule %s: the occurrence did not start: %s", schedule.id, error)
            except Exception as exc:  # a defect: recorded, never the end of the scheduler
                error = f"internal_error: {type(exc).__name__}: {exc}"
                log.exception("schedule %s: the occurrence failed", schedule.id)
            try:
                await self.store.record_fire(schedule.id, fired_at, session_id, error)
            except GreenroomError:
                log.exception("schedule %s: recording the firing failed", schedule.id)

    async def _new_session(self, schedule: Schedule) -> str:
        title = f"{schedule.title or 'Scheduled run'} ({_local(schedule)})"
        return (await self.registry.create(Session.new(title=title))).id

    async def _into_session(self, schedule: Schedule) -> str:
        """Run in the target session, or queue a follow-up (here or on its owner node)."""
        try:
            await self._run_or_follow_up(schedule)
        except OwnedElsewhere as exc:
            if self.remote is None:
                raise
            forwarded = await self.remote(schedule, exc)
            if forwarded is not None:
                return forwarded
            await self._run_or_follow_up(schedule)  # its owner is gone: claimed here
        return schedule.session_id

    async def _run_or_follow_up(self, schedule: Schedule) -> None:
        try:
            await self._run(schedule.session_id, schedule)
        except SessionBusy:  # a turn runs: the message waits for its end, as a follow-up
            handle = self.registry.session(schedule.session_id)
            await handle.follow_up((QueuedMessage(schedule.message),))

    async def _run(self, session_id: str, schedule: Schedule) -> None:
        handle = self.registry.session(session_id)
        stream = await handle.run(
            schedule.agent,
            (ChatMessage("user", schedule.message),),
            agent_name=schedule.agent_name,
            on_disconnect="continue",  # nobody reads the stream: the turn goes on without it
        )
        await stream.aclose()


def _local(schedule: Schedule) -> str:
    """The occurrence as the schedule's zone's wall-clock time."""
    when = datetime.fromtimestamp(schedule.next_fire, zone(schedule.timezone))
    return when.strftime("%Y-%m-%d %H:%M:%S %Z")
