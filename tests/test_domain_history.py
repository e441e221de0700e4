"""Pure history functions: visible messages, fork ordinals, branching, fork titles."""

from __future__ import annotations

import attrs
import pytest

from greenroom.domain import (
    ChatMessage,
    ErrorItem,
    Item,
    Message,
    Session,
    SubSession,
    Summary,
    Usage,
    branch,
    next_fork_title,
    token_totals,
    user_message_index,
    visible_messages,
)
from greenroom.errors import ForkInSubSession, ForkOutOfRange


def msg(role: str, content: str, *, usage: Usage | None = None, id: int = 0) -> Message:
    return Message(ChatMessage(role=role, content=content, usage=usage), "root", id=id)  # type: ignore[arg-type]


def conversation() -> tuple[Message, ...]:
    return (
        msg("system", "be nice", id=1),
        msg("user", "first", id=2),
        msg("assistant", "one", usage=Usage(10, 5), id=3),
        msg("user", "second", id=4),
        msg("assistant", "two", usage=Usage(20, 7), id=5),
    )


def test_visible_messages_skip_system_and_flatten_sub_sessions() -> None:
    sub = Session.new(items=(msg("system", "x"), msg("user", "inner"), msg("assistant", "ok")))
    items: tuple[Item, ...] = (*conversation(), SubSession(sub), Summary("s"), ErrorItem("boom"))
    contents = [m.content for m in visible_messages(items)]
    assert contents == ["first", "one", "second", "two", "inner", "ok"]


# upstream: TestUserMessageOrdinalToItemIndex
def test_user_message_ordinal_to_item_index() -> None:
    items = (msg("user", "a"), msg("system", "s"), msg("assistant", "b"), msg("user", "c"))
    assert user_message_index(items, 0) == 0
    assert user_message_index(items, 1) == 3
    for ordinal in (2, -1, 99):
        with pytest.raises(ForkOutOfRange):
            user_message_index(items, ordinal)


def test_ordinal_counts_sub_session_user_messages_and_refuses_inside() -> None:
    sub = Session.new(items=(msg("user", "inner-1"), msg("user", "inner-2")))
    items = (msg("user", "a"), SubSession(sub), msg("user", "b"))
    assert user_message_index(items, 0) == 0
    for inside in (1, 2):
        with pytest.raises(ForkInSubSession):
            user_message_index(items, inside)
    assert user_message_index(items, 3) == 2
    with pytest.raises(ForkOutOfRange):
        user_message_index(items, 4)


def test_branch_copies_history_before_the_user_message() -> None:
    parent = Session.new(title="Parent", items=conversation(), input_tokens=99, output_tokens=99)
    fork = branch(parent, 1, title="Parent (fork 1)")
    assert fork.id != parent.id
    assert fork.title == "Parent (fork 1)"
    assert [m.content for m in visible_messages(fork.items)] == ["first", "one"]
    assert len(fork.items) == 3
    assert all(isinstance(m, Message) and m.id == 0 for m in fork.items)
    assert (fork.input_tokens, fork.output_tokens) == (10, 5)
    assert fork.created_at >= parent.created_at


def test_branch_gives_sub_sessions_fresh_ids() -> None:
    sub = Session.new(items=(msg("assistant", "done", usage=Usage(3, 4)),))
    parent = Session.new(items=(msg("user", "a"), SubSession(sub), msg("user", "b")))
    fork = branch(parent, 1, title="")
    copied = fork.items[1]
    assert isinstance(copied, SubSession)
    assert copied.session.id != sub.id
    assert copied.session.parent_id == fork.id
    assert token_totals(fork.items) == (3, 4)


# upstream: TestForkSession_DeepCopyIsolatesParent (the pure half; the actor test covers the rest)
def test_branch_isolates_parent() -> None:
    parent = Session.new(items=conversation())
    fork = branch(parent, 1, title="")
    first = fork.items[1]
    assert isinstance(first, Message)
    edited = attrs.evolve(fork, items=(attrs.evolve(first, message=ChatMessage("user", "X")),))
    assert edited.items[0].content == "X"  # type: ignore[union-attr]
    assert parent.items[1].content == "first"  # type: ignore[union-attr]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.agent_name = "mutated"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("parent", "titles", "expected"),
    [
        ("Original", ["Original"], "Original (fork 1)"),
        ("Original", ["Original", "Original (fork 1)", "Original (fork 2)"], "Original (fork 3)"),
        ("Original (fork 2)", ["Original (fork 1)", "Original (fork 3)"], "Original (fork 4)"),
        ("Original", ["Original\t(fork 7)", "Originally (fork 9)"], "Original (fork 8)"),
        ("", ["(fork 1)"], ""),
    ],
)
def test_next_fork_title(parent: str, titles: list[str], expected: str) -> None:
    assert next_fork_title(parent, titles) == expected
