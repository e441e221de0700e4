"""RAG vector search with sqlite-vec, and the exact scan in Python it falls back to: both
give the same hits in the same order. The sqlite-vec tests need a Python whose ``sqlite3``
can load extensions (pyenv builds often cannot; /usr/bin/python3 on Debian can)."""

from __future__ import annotations

import json
import logging
import random
import sqlite3
from pathlib import Path

import pytest
import trio

import greenroom.agents.tools._rag_index as rag_index
from greenroom.agents.tools._rag import RagSearch
from greenroom.agents.tools._rag_index import FileState, IndexStore, cosine, pack, unpack
from tests.agents.test_rag_search import (
    DEADLINE,
    agent_file,
    context,
    servers,
    source_of,
    write_docs,
)

Row = tuple[str, int, str, bytes | None]
needs_vec = pytest.mark.skipif(
    not hasattr(sqlite3.Connection, "enable_load_extension"),
    reason="this Python's sqlite3 cannot load extensions (sqlite-vec is then never used)",
)


@pytest.fixture(autouse=True)
def vec_untried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as if sqlite-vec had not been tried in this process."""
    monkeypatch.setattr(rag_index, "_vec_unavailable", False)


def refuse_vec(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite_vec  # type: ignore[import-untyped]

    def fail(conn: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("loading refused by the test")

    monkeypatch.setattr(sqlite_vec, "load", fail)


def spy_loads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each attempt to load sqlite-vec returned, from now on."""
    results: list[bool] = []
    real = rag_index.load_vec

    def load(db: sqlite3.Connection) -> bool:
        results.append(real(db))
        return results[-1]

    monkeypatch.setattr(rag_index, "load_vec", load)
    return results


def top(rows: list[Row], query: list[float], k: int, threshold: float) -> list[tuple[str, int]]:
    """The ranking of ``Strategy.query``: exact scores, stable sort, threshold, limit."""
    q = unpack(pack(query))
    scored = [(r[0], r[1], cosine(q, unpack(r[3])) if r[3] else 0.0) for r in rows]
    kept = [s for s in scored if s[2] >= threshold and s[2] > 0]
    kept.sort(key=lambda s: -s[2])
    return [(p, i) for p, i, _ in kept[:k]]


def build(tmp_path: Path, dims: int) -> tuple[IndexStore, random.Random]:
    """Chunks with random vectors, exact ties (the same vector in several files), near ties
    (a vector nudged by less than float32 can tell in places), zero and missing vectors."""
    rng = random.Random(7)
    store = IndexStore(tmp_path / "index.sqlite", "{}")
    store.open()
    base = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(40)]
    files: dict[str, list[list[float] | None]] = {}
    for n in range(12):
        vectors: list[list[float] | None] = [rng.choice(base) for _ in range(5)]
        vectors += [[v + rng.gauss(0, 1e-7) for v in rng.choice(base)] for _ in range(5)]
        vectors += [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(20)]
        vectors += [[0.0] * dims, None]
        files[f"/docs/f{n:02d}.md"] = vectors
    for path, vectors in files.items():
        blobs = [pack(v) if v is not None else None for v in vectors]
        store.replace(FileState(path, 1, 1), path, [f"c{i}" for i in range(len(blobs))], blobs)
    return store, rng


@needs_vec
@pytest.mark.parametrize("dims", [3, 64, 1536])
def test_sqlite_vec_finds_the_hits_of_the_exact_scan_in_the_same_order(
    tmp_path: Path, dims: int
) -> None:
    store, rng = build(tmp_path, dims)
    rows = store.chunks()
    stored = [unpack(r[3]).tolist() for r in rows if r[3] and any(unpack(r[3]))]
    for trial in range(30):
        query = list(rng.choice(stored)) if trial % 2 else [rng.gauss(0, 1) for _ in range(dims)]
        k = rng.choice([1, 3, 10, 50, 500])
        threshold = rng.choice([-1.0, 0.0, 0.3])
        found = store.nearest(pack(query), k)
        assert found is not None  # sqlite-vec answered: not the fallback
        if k < 50:
            assert len(found) < len(rows)  # it narrowed the scan
        assert top(found, query, k, threshold) == top(rows, query, k, threshold)
    assert top(store.nearest(pack([0.0] * dims), 3) or [], [0.0] * dims, 3, -1.0) == []
    assert not rag_index._vec_unavailable


@needs_vec
def test_sqlite_vec_rejecting_the_vectors_falls_back_to_the_scan(tmp_path: Path) -> None:
    store, _ = build(tmp_path, 4)
    assert store.nearest(pack([1.0, 0.0, 0.0]), 3) is None  # three dimensions, stored four


def test_a_failing_loader_falls_back_to_python_and_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refuse_vec(monkeypatch)
    store, _ = build(tmp_path, 8)
    with caplog.at_level(logging.WARNING, logger=rag_index.__name__):
        assert store.nearest(pack([1.0] * 8), 3) is None
        assert store.nearest(pack([1.0] * 8), 3) is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "sqlite-vec unavailable" in warnings[0]
    assert "loading refused by the test" in warnings[0] or "enable_load_extension" in warnings[0]


async def search_all(search: RagSearch, queries: list[str]) -> list[object]:
    return [json.loads((await search.search({"query": q})).output) for q in queries]


QUERIES = ["blork moss", "kettle", "purple moon", "tea swamp teeth"]


@needs_vec
async def test_a_search_with_and_without_sqlite_vec_answers_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = write_docs(tmp_path)
    tie = (docs / "kettle.txt").read_text().replace(".", ";")  # another text, same vector
    (docs / "copy.md").write_text(tie)
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url)
            search = RagSearch(source_of(path), context(tmp_path))
            loads = spy_loads(monkeypatch)
            with_vec = await search_all(search, QUERIES)
            assert loads == [True] * len(QUERIES)
            refuse_vec(monkeypatch)
            without = await search_all(search, QUERIES)
            assert loads[len(QUERIES) :] == [False] * len(QUERIES)
    assert with_vec == without
    kettle = with_vec[1]
    assert isinstance(kettle, list)
    assert [hit["source_path"] for hit in kettle[:2]] == [
        str(docs / "copy.md"),
        str(docs / "kettle.txt"),
    ]


@needs_vec
async def test_an_index_built_without_sqlite_vec_is_searched_with_it_without_embedding_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = write_docs(tmp_path)
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url)
            with monkeypatch.context() as patch:
                refuse_vec(patch)
                old = RagSearch(source_of(path), context(tmp_path))
                before = await search_all(old, ["kettle"])
                assert rag_index._vec_unavailable
            monkeypatch.setattr(rag_index, "_vec_unavailable", False)
            indexed = len(embeddings.inputs)
            assert indexed == 4  # three chunks, one query
            search = RagSearch(source_of(path), context(tmp_path))
            loads = spy_loads(monkeypatch)
            after = await search_all(search, ["kettle"])
            assert loads == [True]  # sqlite-vec was used this time
            assert embeddings.inputs[indexed:] == ["kettle"]  # the query only
    assert after == before
    assert before[0][0]["source_path"] == str(docs / "kettle.txt")  # type: ignore[index]
