"""The memory store's session search (decision 0026): a plain scan of every root session, honest
but linear. A session matches a query's words when its title, or one of its user or assistant
messages, holds a word starting with each of them (words as
:func:`greenroom.domain.search_words` cuts them); its
score is minus the number of times those words occur in its best such title or message (a
title counts twice), so lower is better, as with the SQL stores' ranks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping

from greenroom.domain import (
    Message,
    PageKey,
    Session,
    SessionPage,
    SessionQuery,
    SessionSummary,
    search_words,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def created_us(session: Session) -> int:
    return (session.created_at - _EPOCH) // _MICROSECOND


def _texts(session: Session) -> Iterable[tuple[str, int]]:
    yield session.title, 2
    for item in session.items:
        if isinstance(item, Message) and item.role in ("user", "assistant"):
            yield item.content, 1


def score(session: Session, wanted: tuple[str, ...]) -> float | None:
    """Minus the words starting with one of ``wanted`` in the best title or message that has
    one for each; None when none has."""
    return text_score(_texts(session), wanted)


def text_score(texts: Iterable[tuple[str, int]], wanted: tuple[str, ...]) -> float | None:
    """:func:`score` over (text, weight) pairs: a title weighs 2, a message 1."""
    best: float | None = None
    for text, weight in texts:
        if text.isascii():  # folding ASCII is lower-casing: a cheap test first
            lowered = text.lower()
            if not all(w in lowered for w in wanted):
                continue
        found = search_words(text)
        if all(any(word.startswith(w) for word in found) for w in wanted):
            hits = -float(weight * sum(1 for word in found if word.startswith(wanted)))
            best = hits if best is None else min(best, hits)
    return best


def _sort_key(key: PageKey) -> tuple[float, int, int]:
    # Ascending: better score first, then newer, then inserted later.
    return (key.score or 0.0, -key.created_us, -key.seq)


def search(
    sessions: Iterable[Session],
    seqs: Mapping[str, int],
    query: SessionQuery,
    summary: Callable[[Session], SessionSummary],
) -> SessionPage:
    horizon = query.after.horizon if query.after else max(seqs.values(), default=0)
    found: list[tuple[PageKey, Session]] = []
    for session in sessions:
        if session.parent_id or seqs[session.id] > horizon:
            continue
        if query.agent is not None and query.agent not in (session.agent_file, session.agent_name):
            continue
        if query.starred is not None and session.starred != query.starred:
            continue
        created = created_us(session)
        if query.since_us is not None and created < query.since_us:
            continue
        if query.until_us is not None and created >= query.until_us:
            continue
        rank: float | None = None
        if query.words:
            rank = score(session, query.words)
            if rank is None:
                continue
        key = PageKey(
            rank if query.order == "relevance" else None, created, seqs[session.id], horizon
        )
        if query.after is not None and _sort_key(key) <= _sort_key(query.after):
            continue
        found.append((key, session))
    found.sort(key=lambda pair: _sort_key(pair[0]))
    page = found[: query.limit]
    more = len(found) > query.limit
    return SessionPage(tuple(summary(s) for _, s in page), page[-1][0] if more and page else None)
