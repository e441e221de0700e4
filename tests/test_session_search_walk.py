"""Common-word searches (decision 0026): the SQL stores answer them by a bounded walk of the
newest sessions. ``order=recent`` stays exact (the walk or, past its budget, the index);
``order=relevance`` with more matches than the walk's window ranks the newest window of them,
approximately, but still returns only matching sessions, and its pages never repeat one. The
walk's sizes are made small here so that a handful of sessions crosses them.

Real clock: the SQL stores work in threads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from greenroom.domain import SessionQuery, query_words, search_words
from greenroom.persistence import Store, _search_walk
from tests.test_session_search import make
from tests.test_store_contract import KINDS, open_store


@pytest.fixture(params=KINDS)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Store]:
    monkeypatch.setattr(_search_walk, "WALK_SESSIONS", 12)
    monkeypatch.setattr(_search_walk, "BATCH", 5)
    monkeypatch.setattr(_search_walk, "FIRST_BATCH", 5)
    monkeypatch.setattr(_search_walk, "WINDOW", 4)
    async with open_store(request.param, tmp_path) as opened:
        yield opened


async def fill(store: Store) -> list[str]:
    """30 sessions; the ids of those with "build", newest first."""
    matching: list[str] = []
    for n in range(30):
        text = "we build it" if n % 3 != 1 else "nothing to see"
        if n == 25:
            text = "build build build the builder"
        await store.add_session(make(f"s{n:02d}", n, text, "fine"))
        if "build" in text:
            matching.insert(0, f"s{n:02d}")
    await store.add_session(make("old-rare", -5, "a zebracorn", "fine"))  # oldest of all
    return matching


async def walk(store: Store, text: str, order: str, limit: int) -> list[list[str]]:
    pages, after = [], None
    for _ in range(40):
        query = SessionQuery(words=query_words(text), order=order, limit=limit, after=after)  # type: ignore[arg-type]
        page = await store.search_sessions(query)
        pages.append([s.id for s in page.sessions])
        after = page.next
        if after is None:
            return pages
    raise AssertionError("the walk did not end")


async def test_recent_order_stays_exact_past_the_walk(store: Store) -> None:
    matching = await fill(store)
    pages = await walk(store, "build", "recent", 3)
    assert [i for page in pages for i in page] == matching
    assert all(len(page) == 3 for page in pages[:-1])
    # A word only in the oldest session, far past the walk's budget: the index finds it.
    assert await walk(store, "zebrac", "recent", 3) == [["old-rare"]]
    assert await walk(store, "nothing", "recent", 50) == [
        [f"s{n:02d}" for n in range(29, -1, -1) if n % 3 == 1 and n != 25]
    ]


async def test_relevance_beyond_the_window_returns_only_matches_without_repeats(
    store: Store,
) -> None:
    matching = await fill(store)
    pages = await walk(store, "build", "relevance", 3)
    found = [i for page in pages for i in page]
    assert len(found) == len(set(found))  # no session twice
    assert set(found) <= set(matching)  # only sessions that match
    assert found[0] == "s25"  # the best one is in the window and comes first
    if type(store).__name__ == "MemoryStore":
        assert sorted(found) == sorted(matching)  # the memory store ranks them all
    else:
        # Approximate: the newest WINDOW matching sessions, ranked.
        assert sorted(found) == sorted(matching[: _search_walk.WINDOW])


async def test_relevance_with_few_matches_is_exact(store: Store) -> None:
    await fill(store)
    # "nothing": 10 sessions, more than the window, but "zebrac" has one; a word in fewer
    # sessions than the window is ranked by the store itself over every session.
    assert await walk(store, "zebrac", "relevance", 3) == [["old-rare"]]
    await store.add_session(make("s-title", 40, "hello", title="Build plans"))
    first = await store.search_sessions(
        SessionQuery(words=query_words("builder"), order="relevance", limit=5)
    )
    assert [s.id for s in first.sessions] == ["s25"]


async def test_the_walk_folds_case_and_diacritics_as_the_index(store: Store) -> None:
    await fill(store)
    await store.add_session(make("accents", 50, "Ça BÜILDS vité", "fine"))
    await store.add_session(make("ascii", 51, "Tool_call BUILDER-x9", "fine"))
    assert (await walk(store, "build", "recent", 2))[0] == ["ascii", "accents"]
    assert (await walk(store, "vite call x9", "recent", 5)) == [[]]
    assert (await walk(store, "ca vite", "recent", 5)) == [["accents"]]
    assert search_words("Tool_call BUILDER-x9 Ça") == ["tool", "call", "builder", "x9", "ca"]
