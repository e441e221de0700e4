"""The SQLite store's session search (decision 0026): one page of root sessions, filtered,
ranked by FTS5's bm25 over ``search_index`` (migration 0007) or newest first, after a keyset
position. Runs on a read connection."""

from __future__ import annotations

import json
import sqlite3
from functools import partial
from typing import Any

from greenroom.domain import SessionPage, SessionQuery, SessionSummary, parse_datetime

from ._search_walk import Candidate, Fetch, page_of, recent_page, relevance_page, text_score

# The creation time in microseconds since the epoch (milliseconds kept), as the index
# idx_sessions_recent of migration 0007 has it: the same text, so that the planner uses it.
CREATED_US = "(CAST(round((julianday(s.created_at) - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
_BM25 = "bm25(search_index, 2.0, 1.0)"  # a title weighs twice a message

_MATCHES = f"""
WITH m AS MATERIALIZED (
    SELECT rowid AS doc, {_BM25} AS score FROM search_index WHERE search_index MATCH :match
), hits(sid, score) AS (
    SELECT i.session_id, m.score FROM m JOIN items i ON i.id = m.doc WHERE m.doc > 0
    AND gr_has_words(COALESCE(json_extract(replace(i.body, '\\u0000', '\\u0020'),
        '$.message.content'), ''), :rest)
    UNION ALL
    SELECT t.id, m.score FROM m JOIN sessions t ON t.rowid = -m.doc WHERE m.doc < 0
    AND gr_has_words(t.title, :rest)
), ranked AS (SELECT sid, MIN(score) AS score FROM hits GROUP BY sid)
"""
# How many documents hold a word exactly, counted up to a bound (cheap even for a common
# word, unlike its prefix query, which merges every term starting with it).
_PROBE = "SELECT count(*) FROM (SELECT 1 FROM search_index WHERE search_index MATCH ? LIMIT 5000)"

_COLUMNS = (
    "s.rowid AS seq, s.id, s.title, s.created_at, s.input_tokens, s.output_tokens,"
    " s.working_dir, s.starred, s.agent_file, s.agent_name"
)

_COUNT_VISIBLE = """
WITH RECURSIVE tree(root, id) AS (
    SELECT value, value FROM json_each(:ids)
    UNION ALL
    SELECT tree.root, sessions.id FROM sessions JOIN tree ON sessions.parent_id = tree.id
)
SELECT tree.root, COUNT(items.id) FROM tree
JOIN items ON items.session_id = tree.id AND items.kind = 'message' AND items.role != 'system'
GROUP BY tree.root
"""


def match_text(words: tuple[str, ...]) -> str:
    """An FTS5 query: a word starting with each of ``words`` (quoted: letters and digits)."""
    return " ".join(f'"{word}" *' for word in words)


def rarest_first(conn: sqlite3.Connection, words: tuple[str, ...]) -> tuple[str, ...]:
    """``words`` with the rarest (by FTS5's count of documents holding it, bounded) first."""
    if len(words) < 2:
        return words
    counts = {w: int(conn.execute(_PROBE, (f'"{w}"',)).fetchone()[0]) for w in words}
    return tuple(sorted(words, key=lambda w: counts[w]))


def _has_words(text: str | None, rest: str) -> int:
    """SQL ``gr_has_words(text, rest)``: 1 when ``text`` holds a word starting with each of
    the space-separated ``rest`` (the memory store's rule)."""
    wanted = tuple(rest.split())
    return int(not wanted or text_score(((text or "", 1),), wanted) is not None)


def search_sessions(conn: sqlite3.Connection, query: SessionQuery) -> SessionPage:
    params: dict[str, Any] = {"limit": query.limit + 1}
    if query.after is not None:
        params["horizon"] = query.after.horizon
    else:
        row = conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM sessions").fetchone()
        params["horizon"] = int(row[0])
    where = ["s.parent_id IS NULL", "s.rowid <= :horizon"]
    if query.agent is not None:
        where.append("(s.agent_file = :agent OR s.agent_name = :agent)")
        params["agent"] = query.agent
    if query.starred is not None:
        where.append("s.starred = :starred")
        params["starred"] = int(query.starred)
    if query.since_us is not None:
        where.append(f"{CREATED_US} >= :since")
        params["since"] = query.since_us
    if query.until_us is not None:
        where.append(f"{CREATED_US} < :until")
        params["until"] = query.until_us
    relevance = query.order == "relevance" and bool(query.words)
    if query.words:  # common words: a bounded walk of the newest sessions first
        fetch = _fetcher(conn, where, dict(params))
        walked = (relevance_page if relevance else recent_page)(fetch, query, params["horizon"])
        if walked is not None:
            found, following = walked
            ids = [_row(c)["id"] for c in found]
            counts = _counts(conn, ids)
            summaries = tuple(_summary(_row(c), counts.get(_row(c)["id"], 0)) for c in found)
            return SessionPage(summaries, following)
    if query.after is not None:
        params.update(c=query.after.created_us, r=query.after.seq)
        newer = f"({CREATED_US}, s.rowid) < (:c, :r)"
        if relevance:
            params["score"] = query.after.score or 0.0
            newer = f"(r.score > :score OR (r.score = :score AND {newer}))"
        where.append(newer)
    # The list in its order, straight from idx_sessions_recent: without statistics the
    # planner would take idx_sessions_parent and sort every root session.
    prefix, source, score = "", "sessions s INDEXED BY idx_sessions_recent", "NULL"
    if query.words:
        # The index finds the rarest word's documents only (a common prefix's posting list
        # costs ~100 ms at 2M messages); the other words are checked on those texts.
        conn.create_function("gr_has_words", 2, _has_words, deterministic=True)
        rare, *rest = rarest_first(conn, query.words)
        prefix, params["match"], params["rest"] = _MATCHES, match_text((rare,)), " ".join(rest)
        # CROSS JOIN keeps this order: from the matches to their sessions (else the planner
        # walks every root session and probes the matches).
        source, score = "ranked r CROSS JOIN sessions s ON s.id = r.sid", "r.score"
    order = f"{CREATED_US} DESC, s.rowid DESC"
    if relevance:
        order = "r.score, " + order
    sql = (
        f"{prefix} SELECT {_COLUMNS}, {CREATED_US} AS created_us, {score} AS score"
        f" FROM {source} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT :limit"
    )
    rows = conn.execute(sql, params).fetchall()
    count_of = partial(_counts, conn)
    return page_of(rows, query, relevance, params["horizon"], count_of, _summary)


_TEXTS = """
SELECT session_id,
    COALESCE(json_extract(replace(body, '\\u0000', '\\u0020'), '$.message.content'), '')
FROM items WHERE session_id IN (SELECT value FROM json_each(:ids))
AND kind = 'message' AND role IN ('user', 'assistant') ORDER BY id
"""


def _fetcher(conn: sqlite3.Connection, where: list[str], params: dict[str, Any]) -> Fetch:
    """The walk's reader: root sessions newest first with their titles and message texts."""

    def fetch(after: tuple[int, int] | None, n: int) -> list[Candidate]:
        clauses = list(where)
        args = dict(params, n=n)
        if after is not None:
            clauses.append(f"({CREATED_US}, s.rowid) < (:wc, :wr)")
            args.update(wc=after[0], wr=after[1])
        sql = (
            f"SELECT {_COLUMNS}, {CREATED_US} AS created_us"
            f" FROM sessions s INDEXED BY idx_sessions_recent WHERE {' AND '.join(clauses)}"
            f" ORDER BY {CREATED_US} DESC, s.rowid DESC LIMIT :n"
        )
        rows = conn.execute(sql, args).fetchall()
        texts: dict[str, list[tuple[str, int]]] = {r["id"]: [(r["title"], 2)] for r in rows}
        if rows:
            found = conn.execute(_TEXTS, {"ids": json.dumps(list(texts))})
            for sid, content in found:
                texts[sid].append((content, 1))
        return [
            Candidate(int(r["created_us"]), int(r["seq"]), tuple(texts[r["id"]]), r) for r in rows
        ]

    return fetch


def _row(candidate: Candidate) -> sqlite3.Row:
    assert isinstance(candidate.row, sqlite3.Row)
    return candidate.row


def _counts(conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
    if not ids:
        return {}
    return dict(conn.execute(_COUNT_VISIBLE, {"ids": json.dumps(ids)}).fetchall())


def _summary(r: sqlite3.Row, count: int) -> SessionSummary:
    return SessionSummary(
        id=r["id"],
        title=r["title"],
        created_at=parse_datetime(r["created_at"]),
        num_messages=count,
        input_tokens=r["input_tokens"],
        output_tokens=r["output_tokens"],
        working_dir=r["working_dir"],
        starred=bool(r["starred"]),
        agent_file=r["agent_file"],
        agent_name=r["agent_name"],
    )
