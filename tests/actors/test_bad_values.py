"""Defence in depth: a value the edge should have refused reaches an actor anyway.

The store refuses it (UnstorableValue): that one command fails, the live session keeps what the
store holds, the actor keeps serving, and a turn running on the same session is not cancelled.
Mock clock (``autojump_clock``), in-memory store (it refuses what SQLite cannot encode).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from greenroom.actors import Registry
from greenroom.domain import Permissions, Session
from greenroom.errors import UnstorableValue
from greenroom.persistence import MemoryStore
from tests.fakes import FakeRuntime, drain, user

LONE = "\udfff"


async def test_unstorable_values_fail_their_command_and_nothing_else(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    runtime: FakeRuntime,
) -> None:
    session_id = (await registry.create(Session.new(title="kept"))).id
    handle = registry.session(session_id)
    stream = await handle.run("agent", (user("hi"),))
    with trio.fail_after(10):
        await runtime.turn_started.wait()
        with pytest.raises(UnstorableValue):
            await handle.set_title(f"bad {LONE}")
        with pytest.raises(UnstorableValue):
            await handle.set_tokens(2**63, 0, None)
        with pytest.raises(UnstorableValue):
            await handle.set_permissions(Permissions(allow=(LONE,)))
        snapshot = await handle.snapshot()
        assert snapshot.streaming  # the turn runs on
        assert snapshot.session.title == "kept"  # the live copy kept what the store holds
        assert snapshot.session.permissions is None
        await handle.set_title("new")  # the actor keeps serving
        runtime.release()
        await drain(stream)
        await trio.testing.wait_all_tasks_blocked()
    stored = await store.get_session(session_id)
    assert (stored.title, stored.input_tokens, stored.permissions) == ("new", 0, None)
    assert runtime.turns == 1
