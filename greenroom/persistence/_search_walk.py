"""A bounded walk of the newest root sessions for searches whose words are common (decision
0026), shared by the SQLite and PostgreSQL stores. Ranking every matching message of a word
found in 30 % of them takes seconds at 100,000 sessions; reading the newest sessions in the
list's order and matching their texts in Python (the memory store's rule,
:func:`greenroom.persistence._memory_search.text_score`) finds a page of such a word after a
few dozen sessions.

- ``order=recent``: the walk reads at most :data:`WALK_SESSIONS` sessions after the page's
  position; if ``limit + 1`` of them match, that is the page, exactly. Otherwise the words are
  rare there and the store's index answers (it is fast for rare words). A walk whose matches
  so far show that it would not reach its goal within the budget stops after the first batch
  (a rare word costs one batch of :data:`FIRST_BATCH` sessions before the index answers).
- ``order=relevance``: the walk reads at most :data:`WALK_SESSIONS` sessions from the top; if
  more than :data:`WINDOW` match, the answer is approximate: the :data:`WINDOW` newest
  matching sessions, ranked by the memory store's score (minus the query words in the best
  message; a title counts twice), pages walked within them. With :data:`WINDOW` or fewer
  matches among those sessions, the store's own exact ranking answers, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from greenroom.domain import PageKey, SessionPage, SessionQuery, SessionSummary

from ._memory_search import text_score as text_score

WALK_SESSIONS = 300  # sessions one walk reads at most
BATCH = 60  # sessions read per round trip
FIRST_BATCH = 10  # the first round trip's: a rare word costs only these
WINDOW = 100  # matching sessions a common-word relevance search ranks


@attrs.frozen
class Candidate:
    """One root session as the walk reads it: its sort key, its texts (title first) and the
    store's row for the summary."""

    created_us: int
    seq: int
    texts: tuple[tuple[str, int], ...]
    row: object


# (position after which to read, or None for the top; how many) -> the next root sessions in
# the list's order (newest first), the query's filters and horizon applied.
Fetch = Callable[[tuple[int, int] | None, int], Sequence[Candidate]]


@attrs.frozen
class Found:
    """What a walk found: matching candidates (newest first) with their scores."""

    hits: tuple[tuple[float, Candidate], ...]
    exhausted: bool  # the list ended before the walk's budget


def walk(fetch: Fetch, words: tuple[str, ...], after: tuple[int, int] | None, wanted: int) -> Found:
    """Read at most :data:`WALK_SESSIONS` sessions after ``after``, stopping at ``wanted``
    matches."""
    hits: list[tuple[float, Candidate]] = []
    read = 0
    while read < WALK_SESSIONS:
        asked = min(BATCH if read else FIRST_BATCH, WALK_SESSIONS - read)
        batch = fetch(after, asked)
        read += len(batch)
        for candidate in batch:
            score = text_score(candidate.texts, words)
            if score is not None:
                hits.append((score, candidate))
                if len(hits) >= wanted:
                    return Found(tuple(hits), False)
        if len(batch) < asked:
            return Found(tuple(hits), True)
        if len(hits) * WALK_SESSIONS < wanted * read:
            # At this rate the budget would run out first: the words are rare enough for
            # the index, so give up early rather than read the whole budget.
            return Found(tuple(hits), False)
        after = (batch[-1].created_us, batch[-1].seq)
    return Found(tuple(hits), False)


def recent_page(
    fetch: Fetch, query: SessionQuery, horizon: int
) -> tuple[list[Candidate], PageKey | None] | None:
    """The page of an ``order=recent`` word search by a walk, or None when the walk's budget
    ran out first (the caller's index answers)."""
    after = (query.after.created_us, query.after.seq) if query.after else None
    found = walk(fetch, query.words, after, query.limit + 1)
    if len(found.hits) <= query.limit and not found.exhausted:
        return None
    page = [c for _, c in found.hits[: query.limit]]
    following = None
    if len(found.hits) > query.limit and page:
        following = PageKey(None, page[-1].created_us, page[-1].seq, horizon)
    return page, following


def relevance_page(
    fetch: Fetch, query: SessionQuery, horizon: int
) -> tuple[list[Candidate], PageKey | None] | None:
    """The approximate page of a relevance word search whose words match more than
    :data:`WINDOW` of the sessions the walk reads, or None (the caller ranks exactly)."""
    found = walk(fetch, query.words, None, WINDOW + 1)
    if len(found.hits) <= WINDOW:
        return None

    def key(pair: tuple[float, Candidate]) -> tuple[float, int, int]:
        return (pair[0], -pair[1].created_us, -pair[1].seq)

    ranked = sorted(found.hits[:WINDOW], key=key)
    if query.after is not None:
        position = (query.after.score or 0.0, -query.after.created_us, -query.after.seq)
        ranked = [pair for pair in ranked if key(pair) > position]
    page = ranked[: query.limit]
    following = None
    if len(ranked) > query.limit and page:
        score, last = page[-1]
        following = PageKey(score, last.created_us, last.seq, horizon)
    return [c for _, c in page], following


def page_of(
    rows: Sequence[Any],
    query: SessionQuery,
    relevance: bool,
    horizon: int,
    counts: Callable[[list[str]], dict[str, int]],
    summary: Callable[[Any, int], SessionSummary],
) -> SessionPage:
    """A page from ``limit + 1`` rows of a store's search (``id``, ``score``, ``created_us``,
    ``seq`` and the summary's columns): the first ``limit``, and the key after the last when
    there are more."""
    page, more = rows[: query.limit], len(rows) > query.limit
    found = counts([r["id"] for r in page])
    sessions = tuple(summary(r, found.get(r["id"], 0)) for r in page)
    following = None
    if more and page:
        last = page[-1]
        score = float(last["score"]) if relevance else None
        following = PageKey(score, int(last["created_us"]), int(last["seq"]), horizon)
    return SessionPage(sessions, following)
