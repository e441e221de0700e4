"""Randomised stress test of the session registry: many trio tasks race every kind of command.

Rules: fixed seeds (one parametrized case each); a bounded number of operations per seed; the
autojump clock (every hold and pause is virtual time); the in-memory store, wrapped so its calls
take (virtual) time and a cancelled write still lands, as with SQLite. Each worker draws its
operations from its own ``random.Random`` so the plan of a seed is fixed; trio's scheduler still
varies the interleaving between runs, which is the point. The whole run sits in ``fail_after``:
a call that is never answered fails the test instead of hanging it.

Checked while running: never two turns (server-run or guarded by an embedder) at once on one
session; nothing succeeds on a session after its delete returned. Checked afterwards: deleted
sessions have no event log, no store row, no live actor, refuse every command and report
stopped; each live session's store copy has the same history as its actor's. The regression
tests at the end force, one at a time, the races this test found.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import Literal

import pytest
import trio
import trio.testing

from greenroom.actors import (
    Registry,
    RegistryConfig,
    RunStream,
    StreamGuard,
    Subscription,
    open_registry,
)
from greenroom.agents import BuiltRuntime, QueuedMessage, TurnIO
from greenroom.domain import AgentChoice, ElicitationRequest, Message, Permissions, Session
from greenroom.errors import (
    ForkOutOfRange,
    InvalidMessageId,
    MessageNotFound,
    QueueFull,
    SessionBusy,
    SessionNotFound,
    SessionNotRunning,
)
from greenroom.persistence import Lease, MemoryStore, TurnEnd, TurnMark, TurnStart
from tests.fakes import FakeFactory, FakeRuntime, user

SEEDS = [11, 23, 37, 41, 59, 67, 73, 89]
WORKERS = 8
OPS_PER_WORKER = 40  # 320 operations per seed
INITIAL_SESSIONS = 4
MAX_SESSIONS = 16  # forks join the pool until it holds this many (deleted ones included)
MAX_LIVE = 6  # ... and only while fewer live sessions are in it
MIN_LIVE = 2  # no delete is sent while this few undeleted sessions remain
MAX_HOLD = 2.0  # virtual seconds a turn or a guarded embedder turn lasts at most
MAX_STORE_LAG = 0.5  # virtual seconds a store call takes at most (long enough to be cancelled in)
DEADLINE = 3600.0  # virtual seconds: far beyond any legitimate run, so only a hang trips it

EXPECTED = (
    SessionBusy,
    SessionNotFound,
    SessionNotRunning,
    ForkOutOfRange,
    MessageNotFound,
    InvalidMessageId,
    QueueFull,
)


class TurnTracker:
    """Counts turns in progress per session, whoever runs them; records any overlap."""

    def __init__(self) -> None:
        self.active: collections.Counter[str] = collections.Counter()
        self.overlaps: list[str] = []
        self.started = 0

    @contextlib.contextmanager
    def turn(self, session_id: str) -> Iterator[None]:
        self.active[session_id] += 1
        self.started += 1
        if self.active[session_id] > 1:
            self.overlaps.append(session_id)
        try:
            yield
        finally:
            self.active[session_id] -= 1


class StressRuntime(FakeRuntime):
    """A FakeRuntime whose turn emits, holds for a random virtual time, then replies."""

    def __init__(self, tracker: TurnTracker, rng: random.Random) -> None:
        super().__init__()
        self.tracker = tracker
        self.rng = rng

    async def run_stream(self, io: TurnIO) -> None:
        self.streams += 1
        self.max_concurrent = max(self.max_concurrent, self.streams)
        self.turns += 1
        try:
            with self.tracker.turn(io.session.id):
                await io.emit(AgentChoice("thinking", self.current, io.session.id))
                await trio.sleep(self.rng.uniform(0, MAX_HOLD))  # virtual time (autojump clock)
                # A client that leaves right after this event cancels the write that follows.
                await io.emit(AgentChoice("writing", self.current, io.session.id))
                await io.add_message(Message.assistant("done", agent_name=self.current))
                await io.emit(AgentChoice("done", self.current, io.session.id))
        finally:
            self.streams -= 1


class LaggyStore(MemoryStore):
    """The in-memory store with the timing of a real one: a write is done at once but its
    caller hears back only after a random (virtual) lag, and hears back a cancelled write as
    cancelled although it was done, as with the SQLite store's group commit."""

    def __init__(self, seed: int, *, max_lag: float = MAX_STORE_LAG) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.max_lag = max_lag

    async def _lag(self) -> None:
        await trio.sleep(self.rng.uniform(0, self.max_lag))  # virtual time

    async def get_session(self, session_id: str) -> Session:
        await self._lag()
        return await super().get_session(session_id)

    async def add_session(self, session: Session) -> Session:
        stored = await super().add_session(session)
        await self._lag()
        return stored

    async def update_session(self, session: Session) -> None:
        await super().update_session(session)
        await self._lag()

    async def delete_session(self, session_id: str) -> None:
        await super().delete_session(session_id)
        await self._lag()

    async def add_message(self, session_id: str, message: Message) -> int:
        message_id = await super().add_message(session_id, message)
        await self._lag()
        return message_id

    async def update_message(self, session_id: str, message_id: int, message: Message) -> None:
        await super().update_message(session_id, message_id, message)
        await self._lag()

    async def update_permissions(self, session_id: str, permissions: Permissions | None) -> None:
        await super().update_permissions(session_id, permissions)
        await self._lag()

    # The durable log's writes and the claim lag the same way.

    async def claim(self, session_id: str) -> Lease:
        await self._lag()
        return await super().claim(session_id)

    async def begin_turn(
        self, lease: Lease, turn: TurnStart, messages: tuple[Message, ...]
    ) -> tuple[int, ...]:
        ids = await super().begin_turn(lease, turn, messages)
        await self._lag()
        return ids

    async def add_turn_message(self, session_id: str, message: Message, mark: TurnMark) -> int:
        message_id = await super().add_turn_message(session_id, message, mark)
        await self._lag()
        return message_id

    async def end_turn(self, lease: Lease, end: TurnEnd) -> None:
        await super().end_turn(lease, end)
        await self._lag()

    async def reserve_key(self, session_id: str, key: str) -> bool:
        fresh = await super().reserve_key(session_id, key)
        await self._lag()
        return fresh


class StressFactory:
    """Builds a fresh StressRuntime for every session actor that needs one."""

    def __init__(self, tracker: TurnTracker, seed: int) -> None:
        self.tracker = tracker
        self.rng = random.Random(seed)
        self.runtimes: list[StressRuntime] = []

    def make(self) -> StressRuntime:
        runtime = StressRuntime(self.tracker, random.Random(self.rng.random()))
        self.runtimes.append(runtime)
        return runtime

    async def build(self, source: str, agent_name: str, session: Session) -> BuiltRuntime:
        await trio.lowlevel.checkpoint()
        return BuiltRuntime(self.make())


class Stress:
    """The shared state of one seeded run: the session pool and what the workers observed."""

    def __init__(self, registry: Registry, factory: StressFactory, nursery: trio.Nursery) -> None:
        self.registry = registry
        self.factory = factory
        self.tracker = factory.tracker
        self.nursery = nursery
        self.pool: list[str] = []
        self.deleted: set[str] = set()  # ids whose delete returned
        self.doomed: set[str] = set()  # ids a delete was sent for
        self.message_ids: dict[str, list[int]] = collections.defaultdict(list)
        self.ok: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []

    async def attempt(
        self, kind: str, session_id: str, op: Callable[[], Awaitable[object]]
    ) -> None:
        """Run one operation; expected domain errors are fine, anything else propagates."""
        gone = session_id in self.deleted
        try:
            await op()
        except EXPECTED as exc:
            self.refused[f"{kind}:{type(exc).__name__}"] += 1
            if gone and not isinstance(exc, SessionNotFound):
                self.violations.append(f"{kind} on deleted {session_id}: {exc!r}")
            return
        self.ok[kind] += 1
        if gone and kind != "sink":  # a stale sink is a silent no-op
            self.violations.append(f"{kind} succeeded on deleted session {session_id}")

    # --- operations ------------------------------------------------------------------------

    async def run(self, rng: random.Random, session_id: str) -> None:
        policy: Literal["cancel", "continue"] = "continue" if rng.random() < 0.2 else "cancel"
        stream: RunStream = await self.registry.session(session_id).run(
            "agent", (user(f"hi {rng.random():.3f}"),), on_disconnect=policy
        )
        leave_after = rng.choice([0, 1, 2, None, None, None])  # None: read to the end
        patience = rng.uniform(0, MAX_HOLD) if rng.random() < 0.2 else None
        self.nursery.start_soon(self.consume, stream, leave_after, patience)

    async def consume(
        self, stream: RunStream, leave_after: int | None, patience: float | None
    ) -> None:
        with contextlib.ExitStack() as stack:
            stack.callback(stream.close)  # the client disconnects (or has read everything)
            if patience is not None:
                stack.enter_context(trio.move_on_after(patience))
            read = 0
            while leave_after is None or read < leave_after:
                try:
                    await stream.__anext__()
                except StopAsyncIteration:
                    break
                read += 1
        self.ok["stream"] += 1

    async def add_message(self, rng: random.Random, session_id: str) -> None:
        message_id = await self.registry.session(session_id).add_message(Message.user("added"))
        self.message_ids[session_id].append(message_id)

    async def update_message(self, rng: random.Random, session_id: str) -> None:
        known = [i for ids in self.message_ids.values() for i in ids]
        roll = rng.random()
        if roll < 0.1:
            message_id = "not-a-number"
        elif roll < 0.2 or not known:
            message_id = "987654321"
        elif roll < 0.6 and self.message_ids[session_id]:
            message_id = str(rng.choice(self.message_ids[session_id]))
        else:
            message_id = str(rng.choice(known))  # likely another session's: not found here
        await self.registry.session(session_id).update_message(message_id, Message.user("edited"))

    async def steer(self, rng: random.Random, session_id: str) -> None:
        await self.registry.session(session_id).steer((QueuedMessage("steer"),))

    async def follow_up(self, rng: random.Random, session_id: str) -> None:
        await self.registry.session(session_id).follow_up((QueuedMessage("more"),))

    async def sink(self, rng: random.Random, session_id: str) -> None:
        self.registry.elicitation_sink(session_id)(ElicitationRequest("ok?", session_id=session_id))
        await trio.lowlevel.checkpoint()

    async def delete(self, rng: random.Random, session_id: str) -> None:
        self.doomed.add(session_id)
        try:
            await self.registry.delete(session_id)
        finally:
            # Deleted now or found deleted: waiting for its actor to stop must end either way.
            self.nursery.start_soon(self.registry.wait_stopped, session_id)
        self.deleted.add(session_id)
        if self.registry.has_event_log(session_id):
            self.violations.append(f"deleted session {session_id} still has an event log")

    async def fork(self, rng: random.Random, session_id: str) -> None:
        child = await self.registry.fork(session_id, rng.randrange(4))
        live = [s for s in self.pool if s not in self.deleted]
        if len(live) < MAX_LIVE and len(self.pool) < MAX_SESSIONS:
            self.pool.append(child.id)

    async def set_permissions(self, rng: random.Random, session_id: str) -> None:
        permissions = rng.choice([None, Permissions(allow=("read_*",)), Permissions(deny=("*",))])
        await self.registry.session(session_id).set_permissions(permissions)

    async def attach(self, rng: random.Random, session_id: str) -> None:
        guard = await self.registry.attach_runtime(session_id, self.factory.make())
        self.nursery.start_soon(self.embed, random.Random(rng.random()), guard)

    async def embed(self, rng: random.Random, guard: StreamGuard) -> None:
        """An embedder running a few turns of its own under the guard (giving up sometimes)."""
        for _ in range(rng.randrange(1, 4)):
            await trio.sleep(rng.uniform(0, MAX_HOLD))  # virtual time
            if guard.done.is_set():
                return
            with trio.move_on_after(rng.uniform(0, 2 * MAX_HOLD)):
                await self.attempt("guard", guard.session_id, lambda: self.guarded(rng, guard))

    async def guarded(self, rng: random.Random, guard: StreamGuard) -> None:
        async with guard:
            with self.tracker.turn(guard.session_id):
                with trio.move_on_after(rng.uniform(0, MAX_HOLD)):
                    await guard.done.wait()  # deleted: the embedder ends its turn

    async def subscribe(self, rng: random.Random, session_id: str) -> None:
        subscription = await self.registry.subscribe(session_id, since=rng.choice([None, 0, 3]))
        self.nursery.start_soon(self.watch, subscription, rng.uniform(0, 3 * MAX_HOLD))

    async def watch(self, subscription: Subscription, patience: float) -> None:
        last = None
        with subscription, trio.move_on_after(patience):
            async for entry in subscription:
                if entry.seq == 0:
                    continue  # a gap: the replay starts later than asked
                if last is not None and entry.seq != last + 1:
                    self.violations.append(f"subscriber saw seq {entry.seq} after {last}")
                last = entry.seq

    async def snapshot(self, rng: random.Random, session_id: str) -> None:
        await self.registry.session(session_id).snapshot()

    # --- driving ----------------------------------------------------------------------------

    OPS: dict[str, int] = {
        "run": 14,
        "add_message": 10,
        "update_message": 8,
        "steer": 6,
        "follow_up": 6,
        "sink": 6,
        "delete": 2,
        "fork": 5,
        "set_permissions": 5,
        "attach": 3,
        "subscribe": 4,
        "snapshot": 4,
    }

    async def worker(self, rng: random.Random) -> None:
        kinds, weights = zip(*self.OPS.items(), strict=True)
        for _ in range(OPS_PER_WORKER):
            await trio.sleep(rng.uniform(0, MAX_HOLD / 2))  # virtual time
            kind = rng.choices(kinds, weights)[0]
            live = [s for s in self.pool if s not in self.deleted]
            if kind == "delete" and len(set(self.pool) - self.doomed) <= MIN_LIVE:
                kind = "snapshot"  # keep a few sessions alive to check at the end
            # Mostly live sessions; sometimes a deleted one, which must refuse everything.
            session_id = rng.choice(live if live and rng.random() < 0.85 else self.pool)
            method = getattr(self, kind)
            await self.attempt(kind, session_id, functools.partial(method, rng, session_id))


async def refused_everything(registry: Registry, session_id: str) -> list[str]:
    """Every way into a deleted session; returns the ones that did not say SessionNotFound."""
    handle = registry.session(session_id)
    attempts: dict[str, Callable[[], Awaitable[object]]] = {
        "get": lambda: registry.get(session_id),
        "run": lambda: handle.run("agent", (user("again"),)),
        "add_message": lambda: handle.add_message(Message.user("again")),
        "update_message": lambda: handle.update_message("1", Message.user("again")),
        "steer": lambda: handle.steer((QueuedMessage("again"),)),
        "set_permissions": lambda: handle.set_permissions(None),
        "fork": lambda: registry.fork(session_id, 0),
        "delete": lambda: registry.delete(session_id),
        "subscribe": lambda: registry.subscribe(session_id),
        "attach": lambda: registry.attach_runtime(session_id, FakeRuntime()),
    }
    wrong = []
    for name, attempt in attempts.items():
        try:
            await attempt()
        except SessionNotFound:
            continue
        wrong.append(name)
    return wrong


@pytest.mark.parametrize("seed", SEEDS)
async def test_registry_survives_random_races(
    autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    store = LaggyStore(seed)
    tracker = TurnTracker()
    factory = StressFactory(tracker, seed)
    config = RegistryConfig(idle_timeout=1.0)  # short: actors retire and respawn mid-run
    with trio.fail_after(DEADLINE):
        async with open_registry(store, factory, config) as registry:
            async with trio.open_nursery() as nursery:
                stress = Stress(registry, factory, nursery)
                for n in range(INITIAL_SESSIONS):
                    session = await registry.create(Session.new(title=f"s{n}"))
                    stress.pool.append(session.id)
                async with trio.open_nursery() as workers:
                    for n in range(WORKERS):
                        workers.start_soon(stress.worker, random.Random(seed * 1000 + n))
            await trio.testing.wait_all_tasks_blocked()

            # Never two turns at once, by the session-wide count and by each runtime's own.
            assert tracker.overlaps == []
            assert all(r.max_concurrent <= 1 for r in factory.runtimes)
            assert stress.violations == []
            # The run did exercise the races it is about.
            assert tracker.started > 0
            for kind in ("run", "add_message", "delete", "fork", "guard", "stream"):
                assert stress.ok[kind] > 0, (kind, stress.ok, stress.refused)
            assert stress.refused["run:SessionBusy"] + stress.refused["add_message:SessionBusy"]

            live_actors = set(registry.live_ids())
            for session_id in stress.deleted:
                assert not registry.has_event_log(session_id)
                assert session_id not in live_actors
                with pytest.raises(SessionNotFound):
                    await store.get_session(session_id)
                assert await refused_everything(registry, session_id) == []
                await registry.wait_stopped(session_id)  # even after a refused repeat delete
                stale_sink = registry.elicitation_sink(session_id)  # a background job's sink
                stale_sink(ElicitationRequest("still there?", session_id=session_id))
                assert not registry.has_event_log(session_id)

            live = [s for s in stress.pool if s not in stress.deleted]
            assert live, "every session was deleted: the run checked nothing about live ones"
            # Turns a worker started without waiting for may still persist: compare settled
            # sessions only (virtual time; the registry says when no turn runs).
            await registry.wait_turns_over()
            await trio.testing.wait_all_tasks_blocked()
            for session_id in live:
                actor_copy = await registry.get(session_id)
                stored = await store.get_session(session_id)
                assert stored.items == actor_copy.items
                assert stored.permissions == actor_copy.permissions
                assert stored.title == actor_copy.title
    await store.aclose()


# --- regressions: the races above, each forced once --------------------------------------


async def test_guard_request_cancelled_in_the_mailbox_is_never_granted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The guard request waits in the mailbox behind a slow write; its caller gives up. When
    # the actor reaches it later it must not grant the guard to nobody (the session would stay
    # busy for good and its delete would never finish).
    store = LaggyStore(0, max_lag=0)
    with trio.fail_after(600):  # virtual seconds: only a hang trips it
        async with open_registry(store, StressFactory(TurnTracker(), 0)) as registry:
            session = await registry.create(Session.new())
            guard = await registry.attach_runtime(session.id, FakeRuntime())
            store.max_lag = 5.0  # writes take 5 virtual seconds from now on
            handle = registry.session(session.id)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(handle.add_message, Message.user("slow"))
                await trio.testing.wait_all_tasks_blocked()
                with trio.move_on_after(1) as waited:
                    await guard.acquire()
                assert waited.cancelled_caught
            assert (await handle.snapshot()).streaming is False
            await handle.add_message(Message.user("not busy"))
            await registry.delete(session.id)
            await registry.wait_stopped(session.id)
    await store.aclose()


async def test_wait_stopped_returns_after_a_refused_repeat_delete(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # A second delete of a stopped session is refused; it must not leave a stop event behind
    # that nobody will ever set.
    session = await registry.create(Session.new())
    await registry.delete(session.id)
    await registry.wait_stopped(session.id)
    with pytest.raises(SessionNotFound):
        await registry.delete(session.id)
    with trio.fail_after(60):
        await registry.wait_stopped(session.id)


async def test_turn_cancelled_during_a_store_write_keeps_both_copies_equal(
    autojump_clock: trio.testing.MockClock, factory: FakeFactory
) -> None:
    # The client leaves while the turn's reply is being written. The store keeps the write
    # (SQLite commits a cancelled caller's job), so the live history must keep it too.
    store = LaggyStore(0, max_lag=0)
    factory.runtime = FakeRuntime(reply="hello")
    with trio.fail_after(600):  # virtual seconds: only a hang trips it
        async with open_registry(store, factory) as registry:
            session = await registry.create(Session.new())
            handle = registry.session(session.id)
            store.max_lag = 5.0
            stream = await handle.run("agent", (user("hi"),))
            async for _ in stream:  # the agent_choice before the reply is written
                break
            stream.close()
            await trio.sleep(60)  # virtual time (autojump clock)
            live = await registry.get(session.id)
            stored = await store.get_session(session.id)
            assert [m.content for m in live.items if isinstance(m, Message)] == ["hi", "hello"]
            assert stored.items == live.items
    await store.aclose()
