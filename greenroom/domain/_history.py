"""Pure functions over a session's history: visible messages, fork ordinals and branching."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import attrs

from greenroom.errors import ForkInSubSession, ForkOutOfRange

from ._types import Item, Message, Session, SubSession, new_id, utcnow


def visible_messages(items: Iterable[Item]) -> Iterator[Message]:
    """Depth-first: message items except system ones; sub-sessions recurse; the rest is skipped."""
    for item in items:
        if isinstance(item, Message):
            if item.role != "system":
                yield item
        elif isinstance(item, SubSession):
            yield from visible_messages(item.session.items)


def count_user_messages(items: Iterable[Item]) -> int:
    return sum(1 for m in visible_messages(items) if m.role == "user")


def user_message_index(items: tuple[Item, ...], ordinal: int) -> int:
    """The item index of the ``ordinal``-th (0-based) user message.

    Only user messages count; sub-sessions count their own user messages and an ordinal inside
    one cannot be forked at. Raises :class:`ForkOutOfRange` (also for ``ordinal`` equal to the
    number of user messages) or :class:`ForkInSubSession`.
    """
    if ordinal < 0:
        raise ForkOutOfRange()
    seen = 0
    for index, item in enumerate(items):
        if isinstance(item, Message) and item.role == "user":
            if seen == ordinal:
                return index
            seen += 1
        elif isinstance(item, SubSession):
            inner = count_user_messages(item.session.items)
            if ordinal < seen + inner:
                raise ForkInSubSession()
            seen += inner
    raise ForkOutOfRange()


def _copy_items(items: Iterable[Item], parent_id: str) -> tuple[Item, ...]:
    copied: list[Item] = []
    for item in items:
        if isinstance(item, Message):
            copied.append(attrs.evolve(item, id=0))
        elif isinstance(item, SubSession):
            sub = item.session
            fresh = attrs.evolve(sub, id=new_id(), parent_id=parent_id)
            copied.append(SubSession(attrs.evolve(fresh, items=_copy_items(sub.items, fresh.id))))
        else:
            copied.append(item)
    return tuple(copied)


def token_totals(items: Iterable[Item]) -> tuple[int, int]:
    """Input and output tokens summed over the usage of assistant messages (sub-sessions too)."""
    total_in = total_out = 0
    for message in visible_messages(items):
        usage = message.message.usage
        if message.role == "assistant" and usage is not None:
            total_in += usage.input_tokens
            total_out += usage.output_tokens
    return total_in, total_out


def branch(parent: Session, ordinal: int, *, title: str) -> Session:
    """A new session holding the parent's history before its ``ordinal``-th user message.

    The copy has a fresh id and ``created_at``; its messages lose their store ids, its
    sub-sessions get fresh ids, and its token totals are recomputed from what it kept.
    """
    index = user_message_index(parent.items, ordinal)
    fork_id = new_id()
    items = _copy_items(parent.items[:index], fork_id)
    input_tokens, output_tokens = token_totals(items)
    return attrs.evolve(
        parent,
        id=fork_id,
        created_at=utcnow(),
        title=title,
        items=items,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=0.0,
        parent_id="",
    )


_FORK_SUFFIX = re.compile(r"[ \t]*\(fork (\d+)\)$")


def next_fork_title(parent_title: str, titles: Iterable[str]) -> str:
    """``"<base> (fork N)"`` with N one past the highest fork number of ``base`` in ``titles``.

    The base is the parent title without its own ``(fork k)`` suffix, so siblings and forks of
    forks share one counter. An empty parent title gives an empty title.
    """
    if not parent_title:
        return ""
    base = _FORK_SUFFIX.sub("", parent_title)
    highest = 0
    for title in titles:
        if title.startswith(base):
            match = _FORK_SUFFIX.fullmatch(title[len(base) :])
            if match:
                highest = max(highest, int(match.group(1)))
    return f"{base} (fork {highest + 1})"
