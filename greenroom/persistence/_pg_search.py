"""The PostgreSQL store's session search (decision 0026): one page of live root sessions,
filtered, ranked by ``ts_rank`` over the tsvector columns of migration 0004 (the best of the
title, counted twice, and the session's messages) or newest first, after a keyset position.
Runs on a read connection."""

from __future__ import annotations

from functools import partial
from typing import Any

import psycopg
from psycopg.rows import dict_row

from greenroom.domain import SessionPage, SessionQuery, SessionSummary, parse_datetime

from ._search_walk import Candidate, Fetch, page_of, recent_page, relevance_page

Conn = psycopg.Connection[Any]

_MATCHES = """
WITH q AS (SELECT to_tsquery('simple', %(match)s) AS tq),
hits(sid, rank) AS (
    SELECT i.session_id, ts_rank(i.search, q.tq) FROM gr_items i, q WHERE i.search @@ q.tq
    UNION ALL
    SELECT t.session_id, 2 * ts_rank(t.title_search, q.tq) FROM gr_sessions t, q
    WHERE t.title_search @@ q.tq AND t.deleted_at IS NULL
), ranked AS (SELECT sid, (-MAX(rank))::float8 AS score FROM hits GROUP BY sid)
"""

# Several words: GIN finds the rarest word's rows only (MATERIALIZED keeps the planner from
# ANDing in a common prefix's whole posting list); the other words are checked on each row's
# tsvector. Ranked by the rarest word.
_MATCHES_RARE = """
WITH q AS (SELECT to_tsquery('simple', %(match)s) AS tq, to_tsquery('simple', %(rest)s) AS rq),
mi AS MATERIALIZED (
    SELECT i.session_id, ts_rank(i.search, q.tq) AS rank, i.search AS v FROM gr_items i, q
    WHERE i.search @@ q.tq
), mt AS MATERIALIZED (
    SELECT t.session_id, 2 * ts_rank(t.title_search, q.tq) AS rank, t.title_search AS v
    FROM gr_sessions t, q WHERE t.title_search @@ q.tq AND t.deleted_at IS NULL
), hits(sid, rank) AS (
    SELECT mi.session_id, mi.rank FROM mi, q WHERE mi.v @@ q.rq
    UNION ALL
    SELECT mt.session_id, mt.rank FROM mt, q WHERE mt.v @@ q.rq
), ranked AS (SELECT sid, (-MAX(rank))::float8 AS score FROM hits GROUP BY sid)
"""

# The planner's statistics of the messages' lexemes (ANALYZE): the most common ones and their
# frequencies. A word not among them is rarer than all of them.
_STATS = """
SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats
WHERE tablename = 'gr_items' AND attname = 'search' AND schemaname = current_schema()
"""


def rarest_first(conn: Conn, words: tuple[str, ...]) -> tuple[str, ...]:
    """``words`` with the rarest first, by the share of messages holding a lexeme starting
    with it in the planner's statistics (words missing there count as rarest)."""
    if len(words) < 2:
        return words
    row = conn.execute(_STATS).fetchone()
    elems: list[str] = list(row[0] or []) if row else []
    freqs: list[float] = list(row[1] or []) if row else []

    def share(word: str) -> float:
        return sum(f for e, f in zip(elems, freqs, strict=False) if e.startswith(word))

    return tuple(sorted(words, key=share))


_COLUMNS = (
    "s.inserted AS seq, s.session_id AS id, s.title, s.created_at, s.input_tokens,"
    " s.output_tokens, s.working_dir, s.starred, s.agent_file, s.agent_name, s.created_us"
)

_COUNT_VISIBLE = """
WITH RECURSIVE tree(root, id) AS (
    SELECT x, x FROM unnest(%s::text[]) AS x
    UNION ALL
    SELECT tree.root, s.session_id FROM gr_sessions s JOIN tree ON s.parent_id = tree.id
    WHERE s.deleted_at IS NULL
)
SELECT tree.root, COUNT(i.item_id) FROM tree
JOIN gr_items i ON i.session_id = tree.id AND i.kind = 'message' AND i.role <> 'system'
GROUP BY tree.root
"""


def match_text(words: tuple[str, ...]) -> str:
    """A tsquery: a word starting with each of ``words`` (quoted: letters and digits)."""
    return " & ".join(f"'{word}':*" for word in words)


def search_sessions(conn: Conn, query: SessionQuery) -> SessionPage:
    params: dict[str, Any] = {"limit": query.limit + 1}
    if query.after is not None:
        params["horizon"] = query.after.horizon
    else:
        row = conn.execute(  # the newest live root (index gr_sessions_roots)
            "SELECT COALESCE(MAX(inserted), 0) FROM gr_sessions"
            " WHERE deleted_at IS NULL AND parent_id IS NULL"
        ).fetchone()
        params["horizon"] = int(row[0]) if row else 0
    where = ["s.parent_id IS NULL", "s.deleted_at IS NULL", "s.inserted <= %(horizon)s"]
    if query.agent is not None:
        where.append("(s.agent_file = %(agent)s OR s.agent_name = %(agent)s)")
        params["agent"] = query.agent
    if query.starred is not None:
        where.append("s.starred = %(starred)s")
        params["starred"] = int(query.starred)
    if query.since_us is not None:
        where.append("s.created_us >= %(since)s")
        params["since"] = query.since_us
    if query.until_us is not None:
        where.append("s.created_us < %(until)s")
        params["until"] = query.until_us
    relevance = query.order == "relevance" and bool(query.words)
    if query.words:  # common words: a bounded walk of the newest sessions first
        fetch = _fetcher(conn, where, dict(params))
        walked = (relevance_page if relevance else recent_page)(fetch, query, params["horizon"])
        if walked is not None:
            found, following = walked
            rows_ = [_row(c) for c in found]
            counts_ = _counts(conn, [r["id"] for r in rows_])
            summaries = tuple(_summary(r, counts_.get(r["id"], 0)) for r in rows_)
            return SessionPage(summaries, following)
    if query.after is not None:
        params.update(c=query.after.created_us, r=query.after.seq)
        newer = "(s.created_us, s.inserted) < (%(c)s, %(r)s)"
        if relevance:
            params["score"] = query.after.score or 0.0
            newer = f"(r.score > %(score)s OR (r.score = %(score)s AND {newer}))"
        where.append(newer)
    prefix, source, score = "", "gr_sessions s", "NULL::float8"
    if query.words:
        rare, *rest = rarest_first(conn, query.words)
        prefix, params["match"] = _MATCHES, match_text((rare,))
        if rest:
            prefix, params["rest"] = _MATCHES_RARE, match_text(tuple(rest))
        source, score = "ranked r JOIN gr_sessions s ON s.session_id = r.sid", "r.score"
    order = "s.created_us DESC, s.inserted DESC"
    if relevance:
        order = "r.score, " + order
    sql = (
        f"{prefix} SELECT {_COLUMNS}, {score} AS score"
        f" FROM {source} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT %(limit)s"
    )
    rows = conn.cursor(row_factory=dict_row).execute(sql, params).fetchall()
    count_of = partial(_counts, conn)
    return page_of(rows, query, relevance, params["horizon"], count_of, _summary)


def _counts(conn: Conn, ids: list[str]) -> dict[str, int]:
    if not ids:
        return {}
    return {r[0]: int(r[1]) for r in conn.execute(_COUNT_VISIBLE, (ids,)).fetchall()}


_TEXTS = """
SELECT session_id, COALESCE(replace(body, '\\u0000', '\\u0020')::jsonb #>> '{message,content}', '')
FROM gr_items WHERE session_id = ANY(%(ids)s::text[])
AND kind = 'message' AND role IN ('user', 'assistant') ORDER BY session_id, pos
"""


def _fetcher(conn: Conn, where: list[str], params: dict[str, Any]) -> Fetch:
    """The walk's reader: live root sessions newest first with their titles and texts."""

    def fetch(after: tuple[int, int] | None, n: int) -> list[Candidate]:
        clauses = list(where)
        args = dict(params, n=n)
        if after is not None:
            clauses.append("(s.created_us, s.inserted) < (%(wc)s, %(wr)s)")
            args.update(wc=after[0], wr=after[1])
        sql = (
            f"SELECT {_COLUMNS} FROM gr_sessions s WHERE {' AND '.join(clauses)}"
            " ORDER BY s.created_us DESC, s.inserted DESC LIMIT %(n)s"
        )
        rows = conn.cursor(row_factory=dict_row).execute(sql, args).fetchall()
        texts: dict[str, list[tuple[str, int]]] = {r["id"]: [(r["title"], 2)] for r in rows}
        if rows:
            for sid, content in conn.execute(_TEXTS, {"ids": list(texts)}).fetchall():
                texts[sid].append((content, 1))
        return [
            Candidate(int(r["created_us"]), int(r["seq"]), tuple(texts[r["id"]]), r) for r in rows
        ]

    return fetch


def _row(candidate: Candidate) -> dict[str, Any]:
    assert isinstance(candidate.row, dict)
    return candidate.row


def _summary(r: dict[str, Any], count: int) -> SessionSummary:
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
