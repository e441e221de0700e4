"""Building a runtime never blocks the session's mailbox.

The first run of a session builds its runtime in a child task of the actor: the factory, then
the runtime's services (``serve``: MCP servers starting). Meanwhile the session is *building*:
status answers, steer answers that nothing runs, a delete stops the build and the services, and
a second run waits its turn like the first. Here the services are a fake whose start the test
gates; tests/mcp/test_building.py does the same with a real slow MCP server.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from greenroom.actors import Registry, RegistryConfig, open_registry
from greenroom.agents import BuiltRuntime, QueuedMessage
from greenroom.domain import Session
from greenroom.errors import (
    AgentNotFound,
    GreenroomError,
    SessionBusy,
    SessionNotFound,
    SessionNotRunning,
)
from greenroom.persistence import MemoryStore
from tests.fakes import FakeRuntime, drain, user


class ServedRuntime(FakeRuntime):
    """A FakeRuntime with services whose start waits for ``ready`` (an MCP start-up)."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.ready = trio.Event()
        self.serving = False
        self.stopped = False

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self.ready.wait()
            self.serving = True
            task_status.started()
            await trio.sleep_forever()
        finally:
            self.stopped = True


@attrs.define
class GatedFactory:
    """Builds ``runtime``; with ``gate`` set, the build itself waits for it."""

    runtime: FakeRuntime
    gate: trio.Event | None = None
    builds: int = 0

    async def build(self, source: str, agent_name: str, session: Session) -> BuiltRuntime:
        self.builds += 1
        if source != "agent":
            raise AgentNotFound(f"agent source not found: {source}")
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()
        return BuiltRuntime(self.runtime)


@pytest.fixture
def served() -> ServedRuntime:
    return ServedRuntime(hold=True)


async def start_run(registry: Registry, sid: str, nursery: trio.Nursery) -> list[object]:
    """Start a run in the background; the list gets its stream, or the error it raised."""
    outcome: list[object] = []

    async def run() -> None:
        try:
            outcome.append(await registry.session(sid).run("agent", (user("hi"),)))
        except GreenroomError as exc:
            outcome.append(exc)

    nursery.start_soon(run)
    await trio.testing.wait_all_tasks_blocked()
    return outcome


async def test_status_steer_and_a_second_run_answer_while_the_runtime_starts(
    store: MemoryStore, served: ServedRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    factory = GatedFactory(served)
    with trio.fail_after(120):  # virtual seconds: a deadlock fails at once
        async with open_registry(store, factory, RegistryConfig()) as registry:
            sid = (await registry.create(Session.new())).id
            handle = registry.session(sid)
            async with trio.open_nursery() as nursery:
                first = await start_run(registry, sid, nursery)
                assert first == []  # parked: the runtime is building
                status = await handle.status()
                assert (status.building, status.streaming) == (True, False)
                with pytest.raises(SessionNotRunning):
                    await handle.steer((QueuedMessage("hurry"),))
                second = await start_run(registry, sid, nursery)
                assert second == []
                served.ready.set()  # the services are up: the runtime is installed
                await trio.testing.wait_all_tasks_blocked()
                assert served.serving and not served.stopped
                assert isinstance(second[0], SessionBusy)  # the first run got the session
                status = await handle.status()
                assert (status.building, status.streaming) == (False, True)
                served.release()
                await drain(first[0])
            assert factory.builds == 1
        assert (served.stopped, served.closed) == (True, True)  # services stopped, then aclose


async def test_a_delete_during_the_build_stops_the_services(
    store: MemoryStore, served: ServedRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(120):  # virtual seconds: a deadlock fails at once
        async with open_registry(store, GatedFactory(served), RegistryConfig()) as registry:
            sid = (await registry.create(Session.new())).id
            async with trio.open_nursery() as nursery:
                outcome = await start_run(registry, sid, nursery)
                await registry.delete(sid)
                await registry.wait_stopped(sid)
                await trio.testing.wait_all_tasks_blocked()
            assert isinstance(outcome[0], SessionNotFound)
            assert served.stopped and served.closed and not served.serving
            with pytest.raises(SessionNotFound):
                await store.get_session(sid)


async def test_a_slow_factory_does_not_block_the_mailbox_either(
    store: MemoryStore, served: ServedRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    served.ready.set()
    with trio.fail_after(120):  # virtual seconds: a deadlock fails at once
        async with open_registry(store, GatedFactory(served, gate), RegistryConfig()) as registry:
            sid = (await registry.create(Session.new(title="slow"))).id
            async with trio.open_nursery() as nursery:
                outcome = await start_run(registry, sid, nursery)
                assert (await registry.session(sid).status()).building is True
                await registry.session(sid).set_title("renamed meanwhile")
                gate.set()
                await trio.testing.wait_all_tasks_blocked()
                served.release()
                await drain(outcome[0])
            assert (await registry.get(sid)).title == "renamed meanwhile"


async def test_a_failed_build_answers_the_waiting_run_and_the_next_run_builds_again(
    store: MemoryStore, served: ServedRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    factory = GatedFactory(served)
    served.ready.set()
    with trio.fail_after(120):  # virtual seconds: a deadlock fails at once
        async with open_registry(store, factory, RegistryConfig()) as registry:
            sid = (await registry.create(Session.new())).id
            handle = registry.session(sid)
            with pytest.raises(AgentNotFound):
                await handle.run("missing", (user("hi"),))
            with pytest.raises(SessionNotRunning):
                await handle.status()  # nothing is building any more
            stream = await handle.run("agent", (user("hi"),))
            served.release()
            await drain(stream)
            assert factory.builds == 2


async def test_an_idle_actor_does_not_retire_while_building(
    store: MemoryStore, served: ServedRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    config = RegistryConfig(idle_timeout=5.0)
    with trio.fail_after(120):  # virtual seconds: a deadlock fails at once
        async with open_registry(store, GatedFactory(served), config) as registry:
            sid = (await registry.create(Session.new())).id
            async with trio.open_nursery() as nursery:
                outcome = await start_run(registry, sid, nursery)
                await trio.sleep(60)  # virtual: many idle periods
                assert sid in registry.live_ids()
                served.ready.set()
                await trio.testing.wait_all_tasks_blocked()
                served.release()
                await drain(outcome[0])


class BusyRuntime(FakeRuntime):
    """A runtime with a background task running (``busy``) until the test says otherwise."""

    busy = True


async def test_an_actor_whose_runtime_has_background_work_does_not_retire(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    runtime = BusyRuntime()
    config = RegistryConfig(idle_timeout=5.0)
    with trio.fail_after(600):  # virtual seconds
        async with open_registry(store, GatedFactory(runtime), config) as registry:
            sid = (await registry.create(Session.new())).id
            await drain(await registry.session(sid).run("agent", (user("hi"),)))
            await trio.sleep(60)  # virtual: many idle periods
            assert sid in registry.live_ids()
            runtime.busy = False
            await trio.sleep(60)  # virtual
            assert sid not in registry.live_ids()
            assert runtime.closed


class FailingServices(FakeRuntime):
    """Services that start, then fail (a bug in a service)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await self.fail.wait()
        raise RuntimeError("a service broke")


async def test_a_failing_service_is_logged_and_the_session_goes_on(
    store: MemoryStore, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = FailingServices()
    with trio.fail_after(120):  # virtual seconds
        async with open_registry(store, GatedFactory(runtime), RegistryConfig()) as registry:
            sid = (await registry.create(Session.new())).id
            await drain(await registry.session(sid).run("agent", (user("one"),)))
            runtime.fail.set()
            await trio.testing.wait_all_tasks_blocked()
            await drain(await registry.session(sid).run("agent", (user("two"),)))
            assert runtime.turns == 2
    assert "the services of session" in caplog.text
