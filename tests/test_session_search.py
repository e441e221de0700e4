"""Session search (decision 0026) on the memory, SQLite (a file) and PostgreSQL (a database of
its own per test) stores: full-text words over titles and user/assistant messages, the index
following every write, filters, ranking, keyset pages that neither repeat nor miss a session
while sessions are added, and the index built for the rows of an existing database.

Real clock: the SQL stores work in threads."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from greenroom.domain import (
    ChatMessage,
    Message,
    Session,
    SessionQuery,
    SubSession,
    query_words,
)
from greenroom.persistence import Store, _pg_open, _sqlite_open, open_sqlite_store
from tests.test_store_contract import KINDS, open_store

T0 = dt.datetime(2025, 3, 1, 9, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def say(role: str, text: str) -> Message:
    return Message(ChatMessage(role=role, content=text))  # type: ignore[arg-type]


def make(session_id: str, seconds: float, *texts: str, **fields: object) -> Session:
    items = tuple(say("user" if n % 2 == 0 else "assistant", t) for n, t in enumerate(texts))
    return Session(id=session_id, created_at=at(seconds), items=items, **fields)  # type: ignore[arg-type]


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(request.param, tmp_path) as opened:
        yield opened


def store_kind(store: Store) -> str:
    return {"SqliteStore": "sqlite", "PostgresStore": "postgres"}.get(
        type(store).__name__, "memory"
    )


async def ids(store: Store, text: str = "", **options: object) -> list[str]:
    page = await store.search_sessions(SessionQuery(words=query_words(text), **options))  # type: ignore[arg-type]
    return [s.id for s in page.sessions]


async def test_zebracorn_finds_the_session_that_spoke_of_it_and_no_other(store: Store) -> None:
    await store.add_session(make("zoo", 1, "I saw a Zebracorn at the zoo!", "How lovely."))
    await store.add_session(make("zebra", 2, "a zebra", "and a unicorn, zebra-corn"))
    await store.add_session(make("other", 3, "nothing here", "indeed"))
    await store.add_session(make("titled", 4, "hello", title="Plans"))
    assert await ids(store, "zebracorn") == ["zoo"]
    assert await ids(store, "ZEBRACÓRN") == ["zoo"]  # case and diacritics do not count
    assert await ids(store, "zebra corn") == ["zebra"]  # every word, in one message
    assert await ids(store, "zebra lovely") == []  # not in one message
    assert await ids(store, "plans") == ["titled"]  # titles count
    assert await ids(store, "zebrac") == ["zoo"]  # a word's start finds the word
    assert sorted(await ids(store, "zebra")) == ["zebra", "zoo"]
    assert await ids(store, "ebracorn") == []
    assert await ids(store, "zebra'); DROP TABLE sessions; --") == []
    assert await store.count_sessions() == 4


async def test_the_index_follows_every_write(store: Store) -> None:
    stored = await store.add_session(make("s1", 1, "first words"))
    await store.add_session(make("s2", 2, "second words"))
    await store.add_message("s2", say("assistant", "a late zebracorn"))
    assert await ids(store, "zebracorn") == ["s2"]
    first = stored.items[0]
    assert isinstance(first, Message)
    await store.update_message("s1", first.id, say("user", "now a zebracorn too"))
    assert await ids(store, "first") == []
    assert sorted(await ids(store, "zebracorn")) == ["s1", "s2"]
    await store.update_title("s1", "Quagga notes")
    await store.update_title("s1", "Okapi notes")
    assert await ids(store, "quagga") == []
    assert await ids(store, "okapi") == ["s1"]
    await store.add_message("s1", say("system", "secret zebracorn policy"))
    await store.add_message("s1", say("tool", "tool output okapi"))
    await store.delete_session("s2")
    assert await ids(store, "zebracorn") == ["s1"]
    assert await ids(store, "secret") == []  # system and tool messages are not searched
    assert await ids(store, "output") == []
    await store.delete_session("s1")
    assert await ids(store, "zebracorn") == [] and await ids(store, "okapi") == []


async def test_sub_sessions_are_not_listed_and_their_text_stays_theirs(store: Store) -> None:
    sub = make("sub", 2, "the zebracorn helper", title="zebracorn sub")
    root = make("root", 1, "delegate")
    root = Session(id="root", created_at=at(1), items=(*root.items, SubSession(sub)))
    await store.add_session(root)
    assert await ids(store, "zebracorn") == []
    assert await ids(store, "delegate") == ["root"]
    assert await ids(store) == ["root"]


async def test_ranking_best_match_first_then_newest(store: Store) -> None:
    await store.add_session(make("once", 1, "okapi and many other words in this sentence"))
    await store.add_session(make("thrice", 2, "okapi okapi okapi"))
    await store.add_session(make("title", 3, "unrelated", title="Okapi"))
    await store.add_session(make("newer", 4, "okapi and many other words in this sentence"))
    found = await ids(store, "okapi", order="relevance")
    assert found[-2:] == ["newer", "once"], found  # equal texts: newest first
    assert set(found[:2]) == {"thrice", "title"}
    assert await ids(store, "okapi", order="recent") == ["newer", "title", "thrice", "once"]


async def test_filters(store: Store) -> None:
    await store.add_session(make("a", 1, "x", agent_file="pirate.yaml", agent_name="root"))
    await store.add_session(make("b", 2, "x", agent_file="coder.yaml", agent_name="pirate"))
    await store.add_session(make("c", 3, "x", starred=True))
    await store.add_session(make("d", 4, "x"))
    assert await ids(store, agent="pirate.yaml") == ["a"]
    assert await ids(store, agent="pirate") == ["b"]
    assert await ids(store, starred=True) == ["c"]
    assert await ids(store, starred=False) == ["d", "b", "a"]
    us = int(at(2).timestamp()) * 1_000_000
    assert await ids(store, since_us=us) == ["d", "c", "b"]
    assert await ids(store, until_us=us) == ["a"]
    assert await ids(store, since_us=us, until_us=us + 2_000_000) == ["c", "b"]
    assert await ids(store, "x", starred=False, agent="root") == ["a"]


async def test_no_filter_pages_are_the_list_in_order(store: Store) -> None:
    for n in range(7):
        await store.add_session(make(f"s{n}", n % 3, f"text {n}", title=f"t{n}"))
    everything = list(await store.list_sessions())
    pages, after = [], None
    while True:
        page = await store.search_sessions(SessionQuery(limit=3, after=after))
        pages.append(list(page.sessions))
        if page.next is None:
            break
        after = page.next
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [s for p in pages for s in p] == everything  # counts and all


@pytest.mark.parametrize("order", ["recent", "relevance"])
async def test_a_walk_sees_each_session_once_while_sessions_are_added(
    store: Store, order: str
) -> None:
    """Pages of 4, and after each page two more sessions (one matching, one not), one of
    them older than every other: the walk returns exactly the matching sessions that existed
    when it began, each once."""
    expected = set()
    for n in range(15):
        texts = [f"filler {n}"] + ["zebracorn " * (1 + n % 3) + "seen"] * (n % 2 == 0)
        await store.add_session(make(f"s{n}", n, *texts))
        if n % 2 == 0:
            expected.add(f"s{n}")
    seen: list[str] = []
    after, added = None, 0
    for _ in range(20):  # bounded: 8 matches need 2 pages
        query = SessionQuery(words=("zebracorn",), order=order, limit=4, after=after)  # type: ignore[arg-type]
        page = await store.search_sessions(query)
        seen += [s.id for s in page.sessions]
        for older in (True, False):
            added += 1
            seconds = -added if older else 100 + added
            await store.add_session(make(f"new{added}", seconds, "zebracorn seen late"))
        if page.next is None:
            break
        after = page.next
    assert set(seen) <= expected  # sessions added during the walk never join it
    if order == "relevance" and store_kind(store) == "sqlite":
        # bm25 weighs a word by how many documents hold it, so the new sessions move the old
        # ones' ranks: a relevance walk on SQLite may repeat or skip (decision 0026).
        return
    assert len(seen) == len(set(seen)), seen
    assert set(seen) == expected
    again = await ids(store, "zebracorn", limit=200)
    assert len(again) == len(expected) + added  # a new walk sees the new ones


async def test_pages_of_one_over_equal_scores_and_times(store: Store) -> None:
    for n in range(5):
        await store.add_session(make(f"same{n}", 0, "zebracorn"))
    seen, after = [], None
    for _ in range(10):
        query = SessionQuery(words=("zebracorn",), order="relevance", limit=1, after=after)
        page = await store.search_sessions(query)
        seen += [s.id for s in page.sessions]
        if page.next is None:
            break
        after = page.next
    assert seen == [f"same{n}" for n in reversed(range(5))]


# --- existing databases get the index ----------------------------------------------------


def before_search(found: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The migrations before the search one (a database written by the previous version)."""
    cut = next(v for v, name, _ in found if name == "session_search")
    return [m for m in found if m[0] < cut]


async def test_an_existing_sqlite_database_is_indexed_on_migration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    known = _sqlite_open.migrations()
    monkeypatch.setattr(_sqlite_open, "migrations", lambda: before_search(known))
    async with open_sqlite_store(path) as old:
        await old.add_session(make("zoo", 1, "a zebracorn", title="Zoo"))
        await old.add_session(make("other", 2, "no such beast"))
    monkeypatch.setattr(_sqlite_open, "migrations", lambda: known)
    async with open_sqlite_store(path) as store:
        assert await ids(store, "zebracorn") == ["zoo"]
        assert await ids(store, "zoo") == ["zoo"]
        await store.update_title("zoo", "Savanna")  # the backfilled rows delete cleanly
        await store.delete_session("other")
        assert await ids(store, "zoo") == [] and await ids(store, "savanna") == ["zoo"]
        assert await ids(store) == ["zoo"]


async def test_an_existing_postgres_database_is_indexed_on_migration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.pg import database, node

    known = _pg_open.migrations()
    monkeypatch.setattr(_pg_open, "migrations", lambda: before_search(known))
    async with database() as dsn:
        async with node(dsn) as old:
            await old.add_session(make("zoo", 1, "a zebracorn", title="Zoo"))
            await old.add_session(make("other", 2, "no such beast"))
        monkeypatch.setattr(_pg_open, "migrations", lambda: known)
        async with node(dsn) as store:
            assert await ids(store, "zebracorn") == ["zoo"]
            assert await ids(store, "zoo") == ["zoo"]
            assert await ids(store) == ["other", "zoo"]
            assert await ids(store, until_us=int(at(2).timestamp()) * 1_000_000) == ["zoo"]


async def test_a_message_holding_nul_and_escapes_is_stored_and_found(store: Store) -> None:
    await store.add_session(make("nul", 1, 'a\x00zebracorn and \\u0000 "quoted" \\ okapi'))
    assert await ids(store, "zebracorn") == ["nul"]
    assert await ids(store, "okapi quoted") == ["nul"]
