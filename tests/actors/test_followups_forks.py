"""Follow-ups, recall, forks, permission updates and raw tool results (spec §7 items 17-30).

Memory-store tests run on the autojump clock; the SQLite ones on the real clock (thread offload
and autojump do not mix), each bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from greenroom.actors import Registry, open_registry
from greenroom.agents import AgentConfig, QueuedMessage
from greenroom.agents._prompt import build_messages
from greenroom.domain import (
    ChatMessage,
    FunctionCall,
    Item,
    Message,
    Permissions,
    Session,
    ToolCall,
    count_user_messages,
    user_message_index,
    visible_messages,
)
from greenroom.errors import ForkOutOfRange, QueueFull, SessionNotFound, SessionNotRunning
from greenroom.persistence import MemoryStore, SqliteStore, open_sqlite_store
from tests.fakes import FakeFactory, FakeRuntime, RecallingRuntime, drain, user


def assistant(content: str) -> Message:
    return Message(ChatMessage("assistant", content), "root")


def contents(items: tuple[Item, ...]) -> list[str]:
    return [m.content for m in visible_messages(items)]


def queued(*texts: str) -> tuple[QueuedMessage, ...]:
    return tuple(QueuedMessage(text) for text in texts)


# --- follow-ups ----------------------------------------------------------------------------


# upstream: TestFollowUpSession_RoutesToInjectorWhenRegistered
async def test_follow_up_routes_to_injector_when_registered(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    session = await registry.create(Session.new())
    runtime = FakeRuntime()
    await registry.attach_runtime(session.id, runtime)
    handle = registry.session(session.id)
    injected: list[str] = []

    async def inject(content: str) -> None:
        injected.append(content)
        await trio.lowlevel.checkpoint()

    await handle.register_follow_up_injector(inject)
    result = await handle.follow_up(queued("do this", "then that"))
    assert result.streaming  # an injected follow-up always starts or continues a turn
    assert not result.duplicate
    assert result.status == "queued_streaming"
    assert injected == ["do this", "then that"]
    assert runtime.followed == []  # the runtime queue is bypassed


# upstream: TestFollowUpSession_UsesRuntimeQueueWithoutInjector
async def test_follow_up_uses_runtime_queue_without_injector(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    session = await registry.create(Session.new())
    runtime = FakeRuntime()
    await registry.attach_runtime(session.id, runtime)
    result = await registry.session(session.id).follow_up(queued("queued"))
    assert [m.content for m in runtime.followed] == ["queued"]
    assert result.status == "queued_idle"


# upstream: TestFollowUpSession_UnknownSession
async def test_follow_up_unknown_session(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # Our registry knows every stored session, so "not running" means: stored, but no runtime and
    # no injector yet; an id that was never stored (or was deleted) is SessionNotFound.
    session = await registry.create(Session.new())
    with pytest.raises(SessionNotRunning):
        await registry.session(session.id).follow_up(queued("x"))
    with pytest.raises(SessionNotFound):
        await registry.session("does-not-exist").follow_up(queued("x"))
    await registry.delete(session.id)
    with pytest.raises(SessionNotFound):
        await registry.session(session.id).follow_up(queued("x"))


# upstream: TestFollowUpSession_IdempotencyKeyDedupes
async def test_follow_up_idempotency_key_dedupes(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    session = await registry.create(Session.new())
    runtime = FakeRuntime()
    await registry.attach_runtime(session.id, runtime)
    handle = registry.session(session.id)
    first = await handle.follow_up(queued("once"), "key-1")
    assert not first.duplicate
    second = await handle.follow_up(queued("once"), "key-1")
    assert second.duplicate  # a repeat with the same key
    assert second.status == "duplicate"
    third = await handle.follow_up(queued("again"), "key-2")
    assert not third.duplicate
    assert [m.content for m in runtime.followed] == ["once", "again"]


# upstream: TestFollowUpSession_IdempotencyKeyDedupes (a key whose delivery failed is released)
async def test_follow_up_failed_delivery_releases_idempotency_key(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    session = await registry.create(Session.new())
    runtime = FakeRuntime(queue_capacity=0)
    await registry.attach_runtime(session.id, runtime)
    handle = registry.session(session.id)
    with pytest.raises(QueueFull):
        await handle.follow_up(queued("retry me"), "key-1")
    assert runtime.followed == []
    runtime.queue_capacity = 1
    retried = await handle.follow_up(queued("retry me"), "key-1")
    assert not retried.duplicate  # the failed attempt did not burn the key
    assert [m.content for m in runtime.followed] == ["retry me"]
    again = await handle.follow_up(queued("retry me"), "key-1")
    assert again.duplicate
    assert [m.content for m in runtime.followed] == ["retry me"]


# --- recall ----------------------------------------------------------------------------------


# upstream: TestRecallSession_DeleteCancelsRecalledRunAndDoesNotResurrect
async def test_recall_delete_cancels_recalled_run_and_does_not_resurrect(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    runtime = RecallingRuntime()
    factory.runtime = runtime
    session = await registry.create(Session.new(title="t"))
    # One finished turn builds the server-owned runtime, which gets the registry's recall handler.
    await drain(await registry.session(session.id).run("agent", (user("start a job"),)))
    assert runtime.recall is not None
    runtime.hold = True
    runtime.rearm()

    assert await runtime.recall(QueuedMessage("background job finished"))
    with trio.fail_after(1):
        await runtime.turn_started.wait()
    assert runtime.streams == 1

    await registry.delete(session.id)
    with trio.fail_after(1):
        await registry.wait_stopped(session.id)
    assert runtime.streams == 0  # the recalled run was cancelled
    await trio.testing.wait_all_tasks_blocked()
    with pytest.raises(SessionNotFound):
        await store.get_session(session.id)
    with pytest.raises(SessionNotFound):
        await registry.get(session.id)
    # A late recall from the still-alive runtime brings nothing back.
    assert not await runtime.recall(QueuedMessage("late"))
    with pytest.raises(SessionNotFound):
        await store.get_session(session.id)


# --- forks -----------------------------------------------------------------------------------


def two_turns(title: str) -> Session:
    return Session.new(
        title=title,
        items=(
            Message.user("first user"),
            assistant("first answer"),
            Message.user("second user"),
            assistant("second answer"),
        ),
    )


# upstream: TestForkSession_CopiesHistoryBeforeUserMessage
async def test_fork_copies_history_before_user_message(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    parent = await registry.create(two_turns("Parent Title"))
    forked = await registry.fork(parent.id, 1)
    assert forked.id != parent.id
    assert forked.title == "Parent Title (fork 1)"
    assert contents(forked.items) == ["first user", "first answer"]
    loaded = await store.get_session(forked.id)
    assert loaded.id == forked.id
    assert contents(loaded.items) == ["first user", "first answer"]
    assert contents((await store.get_session(parent.id)).items) == contents(parent.items)


# upstream: TestForkSession_ConcurrentWithLiveSessionMutation
async def test_fork_concurrent_with_live_session_mutation(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    parent = await registry.create(
        Session.new(title="Parent Title", items=(Message.user("first user"), assistant("a")))
    )
    handle = registry.session(parent.id)
    forks: list[tuple[int, Session]] = []
    added: list[int] = []

    async def add(n: int) -> None:
        added.append(await handle.add_message(Message.user(f"concurrent {n}")))

    async def fork() -> None:
        # Fork before the last user message seen: it may be one a concurrent add just wrote.
        ordinal = count_user_messages((await handle.snapshot()).session.items) - 1
        forks.append((ordinal, await registry.fork(parent.id, ordinal)))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for n in range(50):
                nursery.start_soon(add, n)
                nursery.start_soon(fork)

    live = await registry.get(parent.id)
    assert len(added) == 50
    assert len(set(added)) == 50
    assert len(live.items) == 2 + 50
    assert contents((await store.get_session(parent.id)).items) == contents(live.items)
    assert len(forks) == 50
    assert sorted(f.title for _, f in forks) == sorted(
        f"Parent Title (fork {n})" for n in range(1, 51)
    )
    assert any(ordinal > 0 for ordinal, _ in forks)  # some forks did include concurrent adds
    for ordinal, forked in forks:
        cut = user_message_index(live.items, ordinal)
        assert contents(forked.items) == contents(live.items[:cut])
        assert contents((await store.get_session(forked.id)).items) == contents(forked.items)


# upstream: TestForkSession_TitleIncrementsAcrossSiblings
async def test_fork_title_increments_across_siblings(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    parent = await registry.create(
        Session.new(
            title="Original",
            items=(
                Message.user("u1"),
                assistant("a1"),
                Message.user("u2"),
                assistant("a2"),
                Message.user("u3"),
            ),
        )
    )
    fork1 = await registry.fork(parent.id, 0)
    assert fork1.title == "Original (fork 1)"
    fork2 = await registry.fork(parent.id, 1)
    assert fork2.title == "Original (fork 2)"
    fork3 = await registry.fork(parent.id, 2)
    assert fork3.title == "Original (fork 3)"
    fork_of_fork = await registry.fork(fork2.id, 0)  # shares the counter
    assert fork_of_fork.title == "Original (fork 4)"


# upstream: TestForkSession_TitleIncrementsAcrossSiblings (concurrent siblings; SQLite, whose
# awaits really interleave, so two forks could otherwise read the same highest number)
async def test_fork_titles_distinct_for_concurrent_siblings_sqlite(tmp_path: Path) -> None:
    titles: list[str] = []
    with trio.fail_after(30):
        async with open_sqlite_store(tmp_path / "sessions.db") as store:
            async with open_registry(store, FakeFactory(FakeRuntime())) as registry:
                parent = await registry.create(
                    Session.new(title="Original", items=(Message.user("u1"),))
                )

                async def fork() -> None:
                    titles.append((await registry.fork(parent.id, 0)).title)

                async with trio.open_nursery() as nursery:
                    for _ in range(10):
                        nursery.start_soon(fork)
            assert sorted(await store.titles()) == sorted(["Original", *titles])
    assert sorted(titles) == sorted(f"Original (fork {n})" for n in range(1, 11))


# upstream: TestForkSession_OutOfRange
async def test_fork_out_of_range(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    parent = await registry.create(Session.new(items=(Message.user("hello"),)))
    for ordinal in (-1, 5, 1):  # 1 == the number of user messages: no silent full clone
        with pytest.raises(ForkOutOfRange):
            await registry.fork(parent.id, ordinal)
    assert await store.count_sessions() == 1


# upstream: TestForkSession_DeepCopyIsolatesParent
async def test_fork_deep_copy_isolates_parent(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    # Values are frozen, so "mutating the fork" is editing its stored message through its actor.
    parent = await registry.create(
        Session.new(items=(Message.user("original"), Message.user("next")))
    )
    forked = await registry.fork(parent.id, 1)
    assert len(forked.items) == 1
    first = forked.items[0]
    assert isinstance(first, Message)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.message.content = "mutated"  # type: ignore[misc]
    mutated = attrs.evolve(first, message=attrs.evolve(first.message, content="mutated"))
    await registry.session(forked.id).update_message(str(first.id), mutated)
    assert contents((await registry.get(forked.id)).items) == ["mutated"]
    assert contents((await store.get_session(forked.id)).items) == ["mutated"]
    assert contents((await store.get_session(parent.id)).items) == ["original", "next"]
    assert contents((await registry.get(parent.id)).items) == ["original", "next"]


# upstream: TestUserMessageOrdinalToItemIndex (the pure function is tested in
# tests/test_domain_history.py::test_user_message_ordinal_to_item_index; this is the fork check)
async def test_fork_cuts_at_user_message_ordinal(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    system = Message(ChatMessage("system", "sys"))
    parent = await registry.create(
        Session.new(items=(Message.user("u1"), system, assistant("a1"), Message.user("u2")))
    )
    assert (await registry.fork(parent.id, 0)).items == ()
    at_one = await registry.fork(parent.id, 1)  # skips past the system and assistant items
    assert [(m.role, m.content) for m in at_one.items if isinstance(m, Message)] == [
        ("user", "u1"),
        ("system", "sys"),
        ("assistant", "a1"),
    ]
    for ordinal in (2, -1, 99):
        with pytest.raises(ForkOutOfRange):
            await registry.fork(parent.id, ordinal)


# --- permissions -----------------------------------------------------------------------------


async def check_permissions_use_active_session(store: MemoryStore | SqliteStore) -> None:
    stored = Session.new(title="stored", permissions=Permissions(allow=("old",)))
    await store.add_session(stored)
    await store.update_session(stored)
    runtime = FakeRuntime()
    async with open_registry(store, FakeFactory(runtime)) as registry:
        # The actor holds a live copy whose title the store has not seen yet.
        await registry.attach_runtime(stored.id, runtime, attrs.evolve(stored, title="live"))
        handle = registry.session(stored.id)
        allow = ["new"]
        await handle.set_permissions(Permissions(allow=allow, deny=["dangerous"]))
        allow[0] = "mutated-by-caller"  # the session holds a copy
        expected = Permissions(allow=("new",), deny=("dangerous",))

        got = await registry.get(stored.id)
        assert got.title == "live"  # the live session wins over the stale store copy
        assert got.permissions == expected
        assert (await store.get_session(stored.id)).permissions == expected

        # A later save of the live session (the persist after a turn) keeps the update.
        await drain(await handle.run("agent", (user("hi"),)))
        assert runtime.turns == 1
        reloaded = await store.get_session(stored.id)
        assert reloaded.title == "live"
        assert reloaded.permissions is not None
        assert reloaded.permissions.allow == ("new",)
        assert reloaded.permissions.deny == ("dangerous",)


# upstream: TestUpdateSessionPermissionsUsesActiveSession (in-memory)
async def test_update_permissions_uses_active_session_memory(
    autojump_clock: trio.testing.MockClock, store: MemoryStore
) -> None:
    with trio.fail_after(10):
        await check_permissions_use_active_session(store)


# upstream: TestUpdateSessionPermissionsUsesActiveSession (sqlite)
async def test_update_permissions_uses_active_session_sqlite(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_sqlite_store(tmp_path / "sessions.db") as store:
            await check_permissions_use_active_session(store)


# upstream: TestUpdateSessionPermissionsConcurrentReads
async def test_update_permissions_concurrent_reads(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    session = await registry.create(Session.new())
    await registry.attach_runtime(session.id, FakeRuntime())
    handle = registry.session(session.id)
    iterations = 100
    seen: list[int] = []

    def check(permissions: Permissions | None) -> None:
        if permissions is None:  # read before the first update
            assert not seen
            return
        assert permissions.ask == ()
        assert permissions.deny == ()
        assert len(permissions.allow) == 1
        value = int(permissions.allow[0])
        assert 0 <= value < iterations
        assert not seen or value >= seen[-1]  # reads never go back in time
        seen.append(value)

    async def update() -> None:
        for i in range(iterations):
            await handle.set_permissions(Permissions(allow=(str(i),)))

    async def read() -> None:
        for _ in range(iterations):
            check((await registry.get(session.id)).permissions)
            check((await handle.snapshot()).session.permissions)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(update)
            nursery.start_soon(read)

    final = Permissions(allow=(str(iterations - 1),))
    assert (await registry.get(session.id)).permissions == final
    assert (await store.get_session(session.id)).permissions == final


# --- raw tool results --------------------------------------------------------------------------


def tool_result(session: Session, call_id: str) -> str:
    for message in visible_messages(session.items):
        if message.role == "tool" and message.message.tool_call_id == call_id:
            return message.content
    raise AssertionError(f"tool result not found: tool_call_id={call_id}")


# upstream: TestAddMessage_SQLitePersistedToolResultCappedOnReload
async def test_add_message_sqlite_persisted_tool_result_capped_on_reload(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    call = ToolCall("tc", FunctionCall("big_tool", "{}"))
    session = Session.new(
        items=(
            Message.user("run big-tool"),
            Message(ChatMessage("assistant", tool_calls=(call,)), "root"),
        )
    )
    oversized = "HEAD" + "x" * 100_000 + "TAIL"
    with trio.fail_after(30):
        async with open_sqlite_store(path) as store:
            await store.add_session(session)
            async with open_registry(store, FakeFactory(FakeRuntime())) as registry:
                result = Message(ChatMessage("tool", oversized, tool_call_id="tc"), "root")
                await registry.session(session.id).add_message(result)
                live = await registry.get(session.id)
                assert tool_result(live, "tc") == oversized
        async with open_sqlite_store(path) as store:
            reloaded = await store.get_session(session.id)
    assert tool_result(reloaded, "tc") == oversized  # persistence keeps the raw result

    # The runtime stamps the agent's cap onto the session before a run; the messages built for
    # the provider are bounded, the history is not rewritten.
    agent = AgentConfig("root", "openai/gpt-4o", instruction="test instruction")
    agent = attrs.evolve(agent, max_tool_result_tokens=100)
    reloaded = attrs.evolve(reloaded, max_tool_result_tokens=agent.max_tool_result_tokens)
    messages = build_messages(
        reloaded, agent, max_tool_result_tokens=reloaded.max_tool_result_tokens
    )
    got = [m.content for m in messages if m.role == "tool" and m.tool_call_id == "tc"]
    assert len(got) == 1  # the result survives the tool-call pairing repair
    assert len(got[0].encode()) // 4 <= 100
    assert got[0].startswith("HEAD")
    assert got[0].endswith("TAIL")
    assert tool_result(reloaded, "tc") == oversized
