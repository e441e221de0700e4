"""The membership loop: join, renew the node's lease, fence the node when it cannot, rejoin.

Two tasks share one state. The renewer renews every ``renew_every`` seconds; the watchdog fences
the node once ``ttl`` seconds (trio's monotonic clock) have passed since the start of the last
successful renew, even while a renew hangs. A renew that answers False (the lease expired, or
the row names another incarnation) fences at once. A DatabaseUnavailable is a failed renew: the
renewer keeps trying until the watchdog fires. Fenced, the renewer joins again (a new
incarnation, which frees what the old one owned) until it succeeds, then unfences.

Fencing must happen before anyone else may claim: the database expires the lease ``ttl`` after
the last renew it committed, which is never earlier than the start of that renew here (clock
rates are assumed to agree; see docs/decisions/0013).
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

import attrs
import trio

from greenroom.errors import GreenroomError
from greenroom.persistence import Membership

log = logging.getLogger(__name__)

NodePhase = Literal["joining", "up", "fenced"]


class Fence(Protocol):
    """What the loop fences: the registry's actors."""

    def fence_all(self, reason: str = ...) -> None: ...

    def unfence(self) -> None: ...


@attrs.frozen
class LeaseTimes:
    ttl: float = 10.0
    renew_every: float = 0.0  # 0: ttl / 3

    @property
    def renew(self) -> float:
        return self.renew_every or self.ttl / 3


class LeaseKeeper:
    """Keeps this node's cluster lease (see the module docstring)."""

    def __init__(self, membership: Membership, fence: Fence, times: LeaseTimes) -> None:
        self.membership = membership
        self.fence = fence
        self.times = times
        self.phase: NodePhase = "joining"
        self.last_ok = 0.0  # trio time at the start of the last successful renew (or join)
        self.fences = 0  # how often the node fenced itself (logs, tests)
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Join (raising if the first join fails: a node that never joined serves nothing),
        report the incarnation, then renew and watch until cancelled."""
        started = trio.current_time()
        incarnation = await self.membership.join()
        self._up(started)
        task_status.started(incarnation)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watchdog)
            await self._renewer()

    def _up(self, started: float) -> None:
        self.last_ok = started
        self.phase = "up"
        self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _fence(self, reason: str) -> None:
        if self.phase == "fenced":
            return
        self.phase = "fenced"
        self.fences += 1
        log.error("fencing this node: %s", reason)
        self.fence.fence_all(reason)
        self._signal()

    @property
    def deadline(self) -> float:
        """Trio time after which this node must not act as an owner."""
        return self.last_ok + self.times.ttl

    async def _watchdog(self) -> None:
        while True:
            if self.phase != "up":
                await self._changed.wait()
                continue
            with trio.move_on_at(self.deadline):
                await self._changed.wait()  # a renew moved the deadline (or a fence came)
                continue
            if trio.current_time() >= self.deadline:  # _fence ignores a second fence
                self._fence(f"no lease renewal for {self.times.ttl:g} s")

    async def _renewer(self) -> None:
        while True:
            await trio.sleep(self.times.renew)
            if self.phase == "fenced":
                await self._rejoin()
                continue
            sent = trio.current_time()
            try:
                renewed = await self.membership.renew()
            except GreenroomError as exc:  # DatabaseUnavailable: retry until the ttl runs out
                log.warning("lease renewal failed: %s", exc)
                continue
            if self.phase != "up":
                continue  # fenced while the renew was on its way: rejoin next round
            if renewed:
                self.last_ok = sent
                self._signal()
            else:
                self._fence("the database says this node's lease expired")

    async def _rejoin(self) -> None:
        sent = trio.current_time()
        try:
            incarnation = await self.membership.join()
        except GreenroomError as exc:
            log.warning("rejoining the cluster failed: %s", exc)
            return
        log.warning("rejoined the cluster as incarnation %d", incarnation)
        self.fence.unfence()
        self._up(sent)
