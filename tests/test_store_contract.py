"""The session store contract: one suite, run against the memory, SQLite and PostgreSQL stores.

Every test gets a fresh store from the ``store`` fixture (``memory``, or ``sqlite`` on a real file
in ``tmp_path``). These tests run on the real clock: the SQLite store works in threads, and
trio's autojump clock would move virtual time on while a thread works.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import attrs
import pytest
import trio

from greenroom.domain import (
    ChatMessage,
    ErrorItem,
    FunctionCall,
    ImageURL,
    Item,
    Message,
    MessagePart,
    Permissions,
    Session,
    SessionSummary,
    SubSession,
    Summary,
    ToolCall,
    Usage,
)
from greenroom.errors import (
    InvalidRequest,
    MessageNotFound,
    SessionExists,
    SessionNotFound,
    StoreError,
    UnstorableValue,
)
from greenroom.persistence import Store, open_memory_store, open_sqlite_store
from tests.slowness import slow

from .pg import postgres_store

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
KINDS = ["memory", "sqlite", "postgres"]


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def open_store(kind: str, tmp_path: Path) -> AbstractAsyncContextManager[Store]:
    if kind == "memory":
        return open_memory_store()
    if kind == "postgres":
        return postgres_store()
    return open_sqlite_store(tmp_path / "store.db")


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(request.param, tmp_path) as opened:
        yield opened


# --- building values ----------------------------------------------------------------------


def msg(role: str, content: str = "", **fields: object) -> Message:
    agent_name = str(fields.pop("agent_name", ""))
    implicit = bool(fields.pop("implicit", False))
    chat = ChatMessage(role=role, content=content, **fields)  # type: ignore[arg-type]
    return Message(chat, agent_name=agent_name, implicit=implicit)


def session(session_id: str, seconds: float = 0, *items: Item, **fields: object) -> Session:
    return Session(id=session_id, created_at=at(seconds), items=items, **fields)  # type: ignore[arg-type]


def messages_of(items: tuple[Item, ...]) -> list[Message]:
    """Every message item, depth-first through sub-sessions, system messages included."""
    found: list[Message] = []
    for item in items:
        if isinstance(item, Message):
            found.append(item)
        elif isinstance(item, SubSession):
            found.extend(messages_of(item.session.items))
    return found


def without_ids(value: Session) -> Session:
    """``value`` with every message id back to 0 (as the caller handed it in)."""
    items: list[Item] = []
    for item in value.items:
        if isinstance(item, Message):
            item = attrs.evolve(item, id=0)
        elif isinstance(item, SubSession):
            item = SubSession(without_ids(item.session))
        items.append(item)
    return attrs.evolve(value, items=tuple(items))


def rich_session() -> Session:
    """A session using every kind of history item and every metadata field."""
    inner = session(
        "sub-inner",
        3,
        msg("user", "inner task"),
        msg("assistant", "inner done", usage=Usage(1, 2, 3, 4, 5)),
        parent_id="sub-1",
        title="inner",
    )
    sub = session(
        "sub-1",
        2,
        msg("system", "you are a helper"),
        msg("user", "delegated: count files", implicit=True, agent_name="root"),
        SubSession(inner),
        msg("assistant", "there are 3 files", agent_name="helper"),
        Summary("sub summary", first_kept_entry=1),
        parent_id="root-1",
        title="helper task",
        input_tokens=7,
    )
    return session(
        "root-1",
        1,
        msg("system", "system prompt"),
        msg(
            "user",
            'look at this \U0001f600 "quoted"\nnew line\x00nul',
            multi_content=(
                MessagePart("text", text="look at this"),
                MessagePart("image_url", image_url=ImageURL("data:image/png;base64,AAAA", "low")),
                MessagePart("image_url", image_url=ImageURL("https://example.com/cat.png")),
            ),
            created_at=at(1.25),
        ),
        msg(
            "assistant",
            "",
            reasoning_content="I should call two tools",
            tool_calls=(
                ToolCall("call-1", FunctionCall("read_file", '{"path": "a.txt"}')),
                ToolCall("call-2", FunctionCall("list_dir", "{}"), type="function"),
            ),
            usage=Usage(input_tokens=100, output_tokens=20, cached_input_tokens=50),
            model="openai/gpt-test",
            created_at=at(1.5),
            agent_name="root",
        ),
        msg("tool", "file contents", tool_call_id="call-1"),
        msg("tool", "permission denied", tool_call_id="call-2", is_error=True),
        SubSession(sub),
        Summary("the story so far", first_kept_entry=3, cost=0.25, model="m", usage=Usage(9, 8)),
        ErrorItem("rate limited", code="rate_limited", agent_name="root", created_at=at(1.75)),
        msg("user", "try again"),
        title="rich \u00e9t\u00e9",
        tools_approved=True,
        safety_policy="balanced",
        input_tokens=123,
        output_tokens=45,
        cost=0.1 + 0.2,
        working_dir="/srv/work",
        permissions=Permissions(allow=("read_*",), ask=("shell",), deny=("rm", "curl")),
        max_iterations=12,
        max_tool_result_tokens=3000,
        agent_model_overrides={"root": "openai/gpt-4o", "helper": "anthropic/claude"},
        custom_models_used=("openai/gpt-4o",),
        starred=True,
        attributes={"team": "blue", "ticket": "GR-1"},
        agent_file="team.yaml",
        agent_name="helper",
    )


# --- add / get ----------------------------------------------------------------------------


async def test_add_session_round_trips_the_whole_history(store: Store) -> None:
    original = rich_session()
    stored = await store.add_session(original)

    # Ids are the only change, every message got one, in depth-first order.
    assert without_ids(stored) == original
    ids = [m.id for m in messages_of(stored.items)]
    assert len(ids) == 11
    assert all(i > 0 for i in ids)
    assert ids == sorted(set(ids))

    assert await store.get_session("root-1") == stored
    # Sub-sessions are sessions of their own, reachable by id.
    stored_sub = stored.items[5]
    assert isinstance(stored_sub, SubSession)
    assert await store.get_session("sub-1") == stored_sub.session
    stored_inner = stored_sub.session.items[2]
    assert isinstance(stored_inner, SubSession)
    assert await store.get_session("sub-inner") == stored_inner.session


async def test_add_session_replaces_caller_ids_with_store_ids(store: Store) -> None:
    first = await store.add_session(session("a", 0, attrs.evolve(msg("user", "hi"), id=4242)))
    second = await store.add_session(
        session("b", 0, attrs.evolve(msg("user", "x"), id=1), attrs.evolve(msg("user", "y"), id=1))
    )
    (only,) = messages_of(first.items)
    x, y = messages_of(second.items)
    assert only.id != 4242
    assert len({only.id, x.id, y.id}) == 3
    assert only.id < x.id < y.id
    assert await store.get_session("a") == first
    assert await store.get_session("b") == second


async def test_add_session_with_an_existing_id_is_an_error(store: Store) -> None:
    stored = await store.add_session(session("dup", 0, msg("user", "first"), title="one"))
    with pytest.raises(StoreError, match="dup"):
        await store.add_session(session("dup", 5, msg("user", "second"), title="two"))
    assert await store.get_session("dup") == stored

    # A sub-session id that exists already fails the whole insert: nothing of it is stored.
    clash = session("new-root", 6, msg("user", "x"), SubSession(session("dup", 7, parent_id="")))
    with pytest.raises(StoreError, match="dup"):
        await store.add_session(clash)
    with pytest.raises(SessionNotFound):
        await store.get_session("new-root")
    assert await store.count_sessions() == 1
    assert await store.get_session("dup") == stored


async def test_add_session_without_id_is_rejected(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        await store.add_session(session("", 0, msg("user", "x")))
    assert await store.count_sessions() == 0


async def test_get_unknown_session(store: Store) -> None:
    with pytest.raises(SessionNotFound) as caught:
        await store.get_session("nope")
    assert caught.value.session_id == "nope"


# --- list_sessions ------------------------------------------------------------------------


async def test_list_sessions_roots_newest_first_with_visible_counts(store: Store) -> None:
    # "a" is at a whole second and "b" half a second later: their RFC 3339 texts sort the
    # other way round ("...:01Z" > "...:01.500000Z"), so text ordering would be caught here.
    a = session(
        "a",
        1,
        msg("system", "sys"),
        msg("user", "u"),
        msg("assistant", "a"),
        Summary("s"),
        ErrorItem("e"),
        title="A",
        input_tokens=3,
        output_tokens=4,
        working_dir="/a",
    )
    sub = session("b-sub", 2, msg("system", "s"), msg("user", "u"), msg("assistant", "a"))
    b = session("b", 1.5, msg("user", "u"), SubSession(sub), msg("tool", "t"), title="B")
    c = session("c", 3, title="C")
    # 2.5 s after T0, written with a +05:00 offset: it sorts between "b" and "c".
    d = Session(id="d", created_at=at(2.5).astimezone(dt.timezone(dt.timedelta(hours=5))))
    for value in (a, b, c, d):
        await store.add_session(value)
    await store.add_sub_session("c", session("c-sub", 4, msg("user", "sub u"), title="C sub"))
    await store.add_message("c-sub", msg("assistant", "added later"))
    await store.add_message("c-sub", msg("system", "not counted"))

    listed = await store.list_sessions()
    assert [s.id for s in listed] == ["c", "d", "b", "a"]
    assert listed[3] == SessionSummary(
        id="a",
        title="A",
        created_at=at(1),
        num_messages=2,
        input_tokens=3,
        output_tokens=4,
        working_dir="/a",
    )
    assert {s.id: s.num_messages for s in listed} == {"a": 2, "b": 4, "c": 2, "d": 0}
    assert listed[1].created_at == at(2.5)


async def test_list_sessions_ties_newest_added_first(store: Store) -> None:
    for name in ("one", "two", "three"):
        await store.add_session(session(name, 1))
    await store.add_session(session("older", 0))
    assert [s.id for s in await store.list_sessions()] == ["three", "two", "one", "older"]


async def test_empty_store(store: Store) -> None:
    assert await store.list_sessions() == []
    assert await store.titles() == []
    assert await store.count_sessions() == 0


# --- update_session -----------------------------------------------------------------------


async def test_update_session_upserts_metadata_and_keeps_items(store: Store) -> None:
    stored = await store.add_session(
        session("s", 0, msg("user", "hello"), msg("assistant", "hi"), title="old")
    )
    await store.add_session(session("other", 1, msg("user", "unrelated"), title="other"))
    changed = attrs.evolve(
        stored,
        created_at=at(100),
        title="new",
        items=(msg("user", "must not be stored"),),
        tools_approved=True,
        safety_policy="strict",
        input_tokens=10,
        output_tokens=20,
        cost=1.5,
        working_dir="/w",
        permissions=Permissions(deny=("shell",)),
        max_iterations=3,
        max_tool_result_tokens=100,
        agent_model_overrides={"root": "m"},
        custom_models_used=("m",),
        starred=True,
        attributes={"k": "v"},
    )
    await store.update_session(changed)

    # Metadata only: the history and the creation time stay as stored.
    expected = attrs.evolve(changed, items=stored.items, created_at=stored.created_at)
    assert await store.get_session("s") == expected
    assert (await store.get_session("other")).title == "other"
    assert sorted(await store.titles()) == ["new", "other"]


async def test_update_session_of_an_unknown_id_creates_it(store: Store) -> None:
    fresh = session("fresh", 5, title="made by upsert", input_tokens=1, starred=True)
    await store.update_session(fresh)
    assert await store.get_session("fresh") == fresh
    assert [s.id for s in await store.list_sessions()] == ["fresh"]
    assert await store.count_sessions() == 1
    message_id = await store.add_message("fresh", msg("user", "works"))
    assert (await store.get_session("fresh")).items == (
        attrs.evolve(msg("user", "works"), id=message_id),
    )


# --- delete_session -----------------------------------------------------------------------


async def test_delete_session_cascades_to_sub_sessions(store: Store) -> None:
    inner = session("inner", 3, msg("user", "deep"), parent_id="sub")
    sub = session("sub", 2, msg("user", "task"), SubSession(inner), parent_id="root")
    await store.add_session(session("root", 1, msg("user", "hi"), SubSession(sub)))
    await store.add_sub_session("root", session("sub-2", 4, msg("user", "second task")))
    keep = await store.add_session(session("keep", 0, msg("user", "stay"), title="keep"))

    await store.delete_session("root")

    for gone in ("root", "sub", "inner", "sub-2"):
        with pytest.raises(SessionNotFound):
            await store.get_session(gone)
    assert await store.titles() == ["keep"]
    assert await store.count_sessions() == 1
    assert await store.get_session("keep") == keep
    with pytest.raises(SessionNotFound):
        await store.delete_session("root")
    with pytest.raises(SessionNotFound):
        await store.delete_session("never-was")


async def test_deleting_a_sub_session_drops_it_from_its_parent(store: Store) -> None:
    sub = session("sub", 2, msg("user", "task"), parent_id="root")
    stored = await store.add_session(
        session("root", 1, msg("user", "before"), SubSession(sub), msg("user", "after"))
    )
    await store.delete_session("sub")
    before, _, after = stored.items
    assert (await store.get_session("root")).items == (before, after)
    assert [s.num_messages for s in await store.list_sessions()] == [2]


# --- messages -----------------------------------------------------------------------------


async def test_add_message_returns_increasing_ids(store: Store) -> None:
    await store.add_session(session("a", 0, msg("user", "first")))
    await store.add_session(session("b", 1))
    ids: list[int] = []
    expected: dict[str, list[Message]] = {"a": [], "b": []}
    for n in range(6):
        target = "ab"[n % 2]
        given = attrs.evolve(msg("user", f"m{n}", agent_name="x"), id=999_999)
        message_id = await store.add_message(target, given)
        ids.append(message_id)
        expected[target].append(attrs.evolve(given, id=message_id))
        assert (await store.get_session(target)).items[-1] == expected[target][-1]
    assert ids == sorted(set(ids))
    assert 999_999 not in ids
    a = await store.get_session("a")
    assert list(a.items[1:]) == expected["a"]
    assert list((await store.get_session("b")).items) == expected["b"]
    with pytest.raises(SessionNotFound):
        await store.add_message("nope", msg("user", "lost"))


async def test_update_message_replaces_it_in_place(store: Store) -> None:
    stored = await store.add_session(
        session("s", 0, msg("user", "q"), msg("assistant", "draft"), msg("user", "next"))
    )
    target = stored.items[1]
    assert isinstance(target, Message)
    replacement = msg(
        "assistant",
        "final",
        tool_calls=(ToolCall("c", FunctionCall("f", "{}")),),
        usage=Usage(1, 1),
        agent_name="root",
    )
    await store.update_message("s", target.id, attrs.evolve(replacement, id=777))
    after = await store.get_session("s")
    assert after.items == (
        stored.items[0],
        attrs.evolve(replacement, id=target.id),
        stored.items[2],
    )


async def test_update_message_of_another_session_changes_nothing(store: Store) -> None:
    sub = session("s-sub", 2, msg("user", "in sub"), parent_id="s")
    mine = await store.add_session(session("s", 0, msg("user", "mine"), SubSession(sub)))
    theirs = await store.add_session(session("t", 1, msg("user", "theirs")))
    their_message = theirs.items[0]
    assert isinstance(their_message, Message)

    with pytest.raises(MessageNotFound):
        await store.update_message("s", their_message.id, msg("user", "hijacked"))
    with pytest.raises(MessageNotFound):
        await store.update_message("s", 10**9, msg("user", "no such message"))
    # A message of a sub-session belongs to the sub-session, not to its parent.
    sub_message = messages_of(mine.items)[1]
    with pytest.raises(MessageNotFound):
        await store.update_message("s", sub_message.id, msg("user", "hijacked"))
    with pytest.raises(SessionNotFound):
        await store.update_message("nope", their_message.id, msg("user", "hijacked"))

    assert await store.get_session("s") == mine
    assert await store.get_session("t") == theirs

    await store.update_message("s-sub", sub_message.id, msg("user", "edited in sub"))
    edited = await store.get_session("s")
    assert messages_of(edited.items)[1] == attrs.evolve(
        msg("user", "edited in sub"), id=sub_message.id
    )


# --- other history items ------------------------------------------------------------------


async def test_add_error_summary_and_sub_session_append_in_order(store: Store) -> None:
    stored = await store.add_session(session("p", 0, msg("user", "go")))
    error = ErrorItem("model failed", code="model_error", agent_name="root", created_at=at(9))
    summary = Summary("compacted", first_kept_entry=1, cost=0.5, model="m", usage=Usage(3, 4))
    await store.add_error("p", error)
    await store.add_summary("p", summary)
    sub = session("p-sub", 3, msg("system", "helper"), msg("user", "do it"), title="sub title")
    await store.add_sub_session("p", sub)
    message_id = await store.add_message("p", msg("assistant", "done"))

    got = await store.get_session("p")
    assert got.items[:3] == (stored.items[0], error, summary)
    stored_sub = got.items[3]
    assert isinstance(stored_sub, SubSession)
    assert without_ids(stored_sub.session) == attrs.evolve(sub, parent_id="p")
    sub_ids = [m.id for m in messages_of(stored_sub.session.items)]
    assert all(0 < i < message_id for i in sub_ids)
    assert got.items[4] == attrs.evolve(msg("assistant", "done"), id=message_id)
    assert await store.get_session("p-sub") == stored_sub.session

    # The sub-session is a session of its own, but not a root.
    assert [s.id for s in await store.list_sessions()] == ["p"]
    assert await store.count_sessions() == 1
    assert sorted(await store.titles()) == ["", "sub title"]
    assert (await store.list_sessions())[0].num_messages == 3


async def test_appending_to_an_unknown_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.add_error("nope", ErrorItem("x"))
    with pytest.raises(SessionNotFound):
        await store.add_summary("nope", Summary("x"))
    with pytest.raises(SessionNotFound):
        await store.add_sub_session("nope", session("orphan", 0, msg("user", "x")))
    with pytest.raises(SessionNotFound):
        await store.get_session("orphan")
    assert await store.titles() == []


async def test_an_existing_id_is_named_session_exists_and_answers_as_a_store_error(
    store: Store,
) -> None:
    await store.add_session(session("dup", 0))
    with pytest.raises(SessionExists) as caught:
        await store.add_session(session("dup", 1))
    with pytest.raises(SessionExists):
        await store.add_sub_session("dup", session("dup", 2))
    # On the wire it is what the bare StoreError was: no client sees a difference.
    assert (caught.value.status, caught.value.code) == (StoreError.status, StoreError.code)


async def test_add_sub_session_with_an_existing_id_changes_nothing(store: Store) -> None:
    parent = await store.add_session(session("p", 0, msg("user", "go")))
    other = await store.add_session(session("taken", 1, title="taken"))
    with pytest.raises(StoreError, match="taken"):
        await store.add_sub_session("p", session("taken", 2, msg("user", "x")))
    assert await store.get_session("p") == parent
    assert await store.get_session("taken") == other


# --- metadata setters ---------------------------------------------------------------------


async def test_metadata_setters(store: Store) -> None:
    stored = await store.add_session(session("s", 0, msg("user", "x"), title="before"))
    await store.update_title("s", "after")
    await store.update_tokens("s", 11, 22, 0.125)
    await store.set_starred("s", True)
    rules = Permissions(allow=("a",), ask=("b", "c"), deny=("d",))
    await store.update_permissions("s", rules)

    got = await store.get_session("s")
    assert got == attrs.evolve(
        stored,
        title="after",
        input_tokens=11,
        output_tokens=22,
        cost=0.125,
        starred=True,
        permissions=rules,
    )
    (listed,) = await store.list_sessions()
    assert (listed.title, listed.input_tokens, listed.output_tokens) == ("after", 11, 22)

    await store.update_permissions("s", None)
    await store.set_starred("s", False)
    got = await store.get_session("s")
    assert got.permissions is None
    assert got.starred is False
    assert await store.titles() == ["after"]


async def test_the_sessions_agent_is_stored_and_listed(store: Store) -> None:
    """Decision 0019: the agent file and agent name round-trip and appear in the listing."""
    stored = await store.add_session(session("s", 0, msg("user", "x")))
    assert (stored.agent_file, stored.agent_name) == ("", "")
    (listed,) = await store.list_sessions()
    assert (listed.agent_file, listed.agent_name) == ("", "")
    await store.update_session(attrs.evolve(stored, agent_file="shell.yaml", agent_name="root"))
    got = await store.get_session("s")
    assert (got.agent_file, got.agent_name) == ("shell.yaml", "root")
    (listed,) = await store.list_sessions()
    assert (listed.agent_file, listed.agent_name) == ("shell.yaml", "root")
    await store.update_session(attrs.evolve(got, agent_name="planner"))
    assert (await store.get_session("s")).agent_name == "planner"


async def test_metadata_setters_on_an_unknown_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.update_title("nope", "t")
    with pytest.raises(SessionNotFound):
        await store.update_permissions("nope", None)
    with pytest.raises(SessionNotFound):
        await store.update_tokens("nope", 1, 2, 3.0)
    with pytest.raises(SessionNotFound):
        await store.set_starred("nope", True)
    assert await store.count_sessions() == 0


async def test_titles_and_count(store: Store) -> None:
    await store.add_session(session("a", 0, title="Alpha"))
    await store.add_session(session("b", 1, title="Alpha (fork 1)"))
    await store.add_sub_session("a", session("a-sub", 2, title="sub"))
    assert sorted(await store.titles()) == ["Alpha", "Alpha (fork 1)", "sub"]
    assert await store.count_sessions() == 2


# --- values handed out ---------------------------------------------------------------------


async def test_values_cannot_be_changed_by_callers(store: Store) -> None:
    attributes = {"k": "v"}
    overrides = {"root": "m"}
    given = session(
        "s", 0, msg("user", "x"), attributes=attributes, agent_model_overrides=overrides
    )
    stored = await store.add_session(given)
    attributes["k"] = "changed by the caller"
    overrides["root"] = "changed"

    got = await store.get_session("s")
    assert got == stored
    assert dict(got.attributes) == {"k": "v"}
    assert dict(got.agent_model_overrides) == {"root": "m"}
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        got.title = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        got.attributes["k"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        got.agent_model_overrides["x"] = "y"  # type: ignore[index]
    first = got.items[0]
    assert isinstance(first, Message)
    assert isinstance(got.items, tuple)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.id = 1  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.message.content = "x"  # type: ignore[misc]

    listed = await store.list_sessions()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        listed[0].title = "x"  # type: ignore[misc]
    listed.clear()
    titles = await store.titles()
    titles.append("injected")
    assert [s.id for s in await store.list_sessions()] == ["s"]
    assert await store.titles() == [""]
    assert await store.get_session("s") == stored


# --- concurrency --------------------------------------------------------------------------


async def test_concurrent_add_message_from_50_tasks(store: Store) -> None:
    await store.add_session(session("s", 0))
    ids: dict[str, int] = {}

    async def add(n: int) -> None:
        ids[f"m{n}"] = await store.add_message("s", msg("user", f"m{n}"))

    with trio.fail_after(slow(30)):
        async with trio.open_nursery() as nursery:
            for n in range(50):
                nursery.start_soon(add, n)

    assert len(set(ids.values())) == 50
    items = (await store.get_session("s")).items
    assert len(items) == 50
    stored = [item for item in items if isinstance(item, Message)]
    # Stored in the order of their ids, each under the id its caller was given.
    assert [m.id for m in stored] == sorted(ids.values())
    assert {m.content: m.id for m in stored} == ids


# --- lifecycle ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_closed_store_refuses_calls(kind: str, tmp_path: Path) -> None:
    async with open_store(kind, tmp_path) as opened:
        await opened.add_session(session("s", 0))
        await opened.aclose()
        await opened.aclose()
        with pytest.raises(StoreError, match="closed"):
            await opened.get_session("s")
        with pytest.raises(StoreError, match="closed"):
            await opened.add_message("s", msg("user", "late"))
        with pytest.raises(StoreError, match="closed"):
            await opened.list_sessions()


@pytest.mark.parametrize("kind", KINDS)
async def test_an_error_in_the_block_comes_out_as_raised(kind: str, tmp_path: Path) -> None:
    # Not wrapped in an ExceptionGroup by the store's nursery: callers catch what they raised.
    with pytest.raises(SessionNotFound):
        async with open_store(kind, tmp_path) as opened:
            await opened.get_session("nope")
    with pytest.raises(KeyError, match="mine"):
        async with open_store(kind, tmp_path) as opened:
            raise KeyError("mine")


# --- values no store can keep ----------------------------------------------------------------


async def test_unstorable_values_fail_that_one_write(store: Store) -> None:
    """Defence behind the edge: a lone surrogate or an integer beyond 64 bits fails its own
    write with UnstorableValue; the store keeps serving and holds nothing of it."""
    lone = "\ud800"
    await store.add_session(session("s1", 0, msg("user", "hi")))
    with pytest.raises(UnstorableValue):
        await store.add_session(session("s2", 1, title=lone))
    with pytest.raises(UnstorableValue):
        await store.update_title("s1", lone)
    with pytest.raises(UnstorableValue):
        await store.add_message("s1", msg("user", lone))
    with pytest.raises(UnstorableValue):
        await store.update_tokens("s1", 2**63, 0, 0.0)
    with pytest.raises(UnstorableValue):
        await store.update_session(attrs.evolve(await store.get_session("s1"), title=lone))
    stored = await store.get_session("s1")
    assert (stored.title, stored.input_tokens) == ("", 0)
    assert [m.content for m in messages_of(stored.items)] == ["hi"]
    assert [s.id for s in await store.list_sessions()] == ["s1"]
    await store.update_title("s1", "fine")  # and the next good write goes through
    assert (await store.get_session("s1")).title == "fine"
