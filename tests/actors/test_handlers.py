"""Handlers against a fake actor context: what each checks before it changes anything.

White-box by design: it imports the handler table and the context contract
(``greenroom.actors._handlers``, ``_commands``, ``_context``, ``_live``), which is the point of
the context: a handler sees only :class:`ActorContext`, so a fake of it is enough to run one.
The fake records the intents a handler asks for; the live session writes to a memory store.
Runs on the mock clock; no actor, registry or runtime task is started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

from greenroom.actors import RegistryConfig, _commands as c
from greenroom.actors._commands import (
    CancelTurn,
    Decide,
    Delete,
    NeedsRuntime,
    Request,
    RunTurn,
    SetSafetyPolicy,
    Stop,
    Turn,
)
from greenroom.actors._context import ActorContext
from greenroom.actors._idempotency import IdempotencyCache
from greenroom.actors._live import LiveSession
from greenroom.actors._results import FollowUpInjector, GuardTicket
from greenroom.actors._table import TABLE  # filled as greenroom.actors loads its handlers
from greenroom.agents import BuiltRuntime, Runtime, RuntimeFactory, TitleGenerator
from greenroom.domain import Event, Session, utcnow
from greenroom.errors import (
    AgentMismatch,
    InvalidRequest,
    NeedsDecision,
    SessionBusy,
    ToolCallNotFound,
)
from greenroom.persistence import (
    EventReader,
    Lease,
    MemoryStore,
    Store,
    ToolCallRecord,
    Writer,
    open_memory_store,
)
from tests.fakes import FakeRuntime, user

R = TypeVar("R")


class FakeContext:
    """An :class:`ActorContext` with plain fields; intents are appended to ``asked``."""

    def __init__(self, store: MemoryStore, session: Session) -> None:
        self.id = session.id
        self.config = RegistryConfig()
        self.store: Store = store
        self.writer: Writer = store
        self.events: EventReader = store
        self.live = LiveSession(session, store, store, self, write_grace=1.0, close_grace=1.0)
        self.runtime: Runtime | None = None
        self.runtime_source = ""
        self.title_generator: TitleGenerator | None = None
        self.title_due = True
        self.building = False
        self.streaming = False
        self.turn: Turn | None = None
        self.deleted = False
        self.lost = False
        self.in_doubt: Mapping[str, ToolCallRecord] = {}
        self.injector: FollowUpInjector | None = None
        self.idempotency = IdempotencyCache()
        self.log = None
        self.asked: list[str] = []

    @property
    def factory(self) -> RuntimeFactory:
        raise AssertionError("no handler builds a runtime itself")

    @property
    def session(self) -> Session:
        return self.live.session

    @property
    def lease(self) -> Lease:
        return self.live.lease

    def agent_name(self) -> str:
        return "root"

    def num_messages(self) -> int:
        return 0

    def install_runtime(self, built: BuiltRuntime, source: str, agent_name: str) -> None:
        self.asked.append("install_runtime")

    def attach(self, runtime: Runtime, done: trio.Event) -> None:
        self.asked.append("attach")

    async def resume_parked(self) -> None:
        self.asked.append("resume_parked")
        await trio.lowlevel.checkpoint()

    def fail_parked(self, error: Exception) -> None:
        self.asked.append("fail_parked")

    def build_ended(self, scope: trio.CancelScope) -> None:
        self.asked.append("build_ended")

    def set_injector(self, injector: FollowUpInjector | None) -> None:
        self.asked.append("set_injector")

    def acquire_guard(self, ticket: GuardTicket) -> None:
        self.asked.append("acquire_guard")

    def start_turn(self, turn: Turn, body: Callable[[], Awaitable[None]]) -> None:
        self.asked.append("start_turn")

    def end_turn(self, turn: Turn) -> None:
        self.asked.append("end_turn")

    def start_title(self, body: Callable[[], Awaitable[None]]) -> None:
        self.asked.append("start_title")

    def on_title_asked(self) -> None:
        self.asked.append("on_title_asked")

    def decided(self, tool_call_id: str) -> None:
        self.asked.append("decided")

    def mark_deleted(self) -> None:
        self.asked.append("mark_deleted")

    def mark_stopping(self) -> None:
        self.asked.append("mark_stopping")

    def log_event(self, event: Event) -> None:
        self.asked.append("log_event")

    async def call_self(self, request: Request[R]) -> R:
        raise AssertionError("no handler calls its own actor")


async def handle(ctx: ActorContext, request: Request[R]) -> R:
    result: R = await TABLE[type(request)](ctx, request)
    return result


@pytest.fixture
async def ctx() -> Any:
    async with open_memory_store() as store:
        session = await store.add_session(Session.new())
        yield FakeContext(store, session)


def test_every_command_has_a_handler() -> None:
    # attrs replaces each slotted class with a new one: count the classes the module names.
    commands = {cls for cls in Request.__subclasses__() if getattr(c, cls.__name__) is cls}
    assert commands == set(TABLE)


async def test_a_run_while_streaming_is_refused_and_changes_nothing(ctx: FakeContext) -> None:
    ctx.streaming = True
    ctx.runtime = FakeRuntime()
    with pytest.raises(SessionBusy):
        await handle(ctx, RunTurn("agent.yaml", "", (user("hi"),), model="other"))
    assert ctx.asked == [] and ctx.session.items == ()
    assert ctx.session.agent_model_overrides == {}


async def test_a_run_with_calls_in_doubt_names_them(ctx: FakeContext) -> None:
    ctx.runtime = FakeRuntime()
    ctx.in_doubt = {"call-b": _record("call-b"), "call-a": _record("call-a")}
    with pytest.raises(NeedsDecision, match=r"\(call-a, call-b\)"):
        await handle(ctx, RunTurn("agent.yaml", "", (user("hi"),)))
    assert ctx.asked == []


async def test_a_run_without_a_runtime_asks_for_one_before_changing_anything(
    ctx: FakeContext,
) -> None:
    with pytest.raises(NeedsRuntime) as raised:
        await handle(ctx, RunTurn("team.yaml", "helper", (user("hi"),)))
    assert (raised.value.source, raised.value.agent_name) == ("team.yaml", "helper")
    assert ctx.asked == [] and ctx.session.items == ()


async def test_a_run_naming_another_agent_is_refused_before_anything(ctx: FakeContext) -> None:
    """Decision 0019: the stored agent decides, even before a runtime is built."""
    ctx.live.revise(agent_file="shell", agent_name="root")
    with pytest.raises(AgentMismatch, match='runs agent "shell/root"; this run names "todo"'):
        await handle(ctx, RunTurn("todo", "", (user("hi"),)))
    with pytest.raises(AgentMismatch, match='names "shell/planner"'):
        await handle(ctx, RunTurn("shell", "planner", (user("hi"),)))
    assert ctx.asked == [] and ctx.session.items == ()
    # The same source, no agent name: the session goes on with its own agent.
    with pytest.raises(NeedsRuntime) as raised:
        await handle(ctx, RunTurn("shell", "", (user("hi"),)))
    assert (raised.value.source, raised.value.agent_name) == ("shell", "root")


async def test_cancel_without_a_turn_answers_false(ctx: FakeContext) -> None:
    assert await handle(ctx, CancelTurn()) is False


async def test_cancel_cancels_the_running_turn(ctx: FakeContext) -> None:
    ctx.turn = Turn(trio.CancelScope(), None)
    assert await handle(ctx, CancelTurn()) is True
    assert ctx.turn.scope.cancel_called


async def test_delete_marks_the_actor_deleted_before_the_store_forgets_the_session(
    ctx: FakeContext,
) -> None:
    await handle(ctx, Delete())
    assert ctx.asked == ["mark_deleted"]
    assert await ctx.store.list_sessions() == []


async def test_stop_marks_stopping_then_persists(ctx: FakeContext) -> None:
    ctx.live.revise(title="kept")
    await handle(ctx, Stop())
    assert ctx.asked == ["mark_stopping"]
    assert (await ctx.store.get_session(ctx.id)).title == "kept"


async def test_an_unknown_safety_policy_names_the_field(ctx: FakeContext) -> None:
    with pytest.raises(InvalidRequest) as raised:
        await handle(ctx, SetSafetyPolicy("yolo"))
    assert raised.value.path == "$.safety_policy"
    assert ctx.session.safety_policy == ""


async def test_a_legacy_safety_policy_is_stored_under_its_current_name(ctx: FakeContext) -> None:
    await handle(ctx, SetSafetyPolicy("unsafe"))
    stored = await ctx.store.get_session(ctx.id)
    assert (stored.safety_policy, stored.tools_approved) == ("autonomous", True)
    assert ctx.session == stored


async def test_deciding_an_unknown_call_is_not_found(ctx: FakeContext) -> None:
    with pytest.raises(ToolCallNotFound):
        await handle(ctx, Decide("nope", "skip"))


async def test_a_rerun_while_streaming_is_refused(ctx: FakeContext) -> None:
    ctx.streaming = True
    ctx.in_doubt = {"call-a": _record("call-a")}
    with pytest.raises(SessionBusy):
        await handle(ctx, Decide("call-a", "rerun"))
    assert ctx.asked == []


def _record(tool_call_id: str) -> ToolCallRecord:
    return ToolCallRecord(
        session_id="s",
        tool_call_id=tool_call_id,
        turn_id="t",
        name="shell",
        arguments="{}",
        state="in_doubt",
        started_seq=1,
        started_at=utcnow(),
    )
