"""The SQL of the PostgreSQL store's sessions and history: functions of a connection, run on
the writer thread or a read-pool thread; the same functions as :mod:`._sqlite_sql`. Deleted
sessions are tombstones: every lookup here sees only rows with ``deleted_at IS NULL``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import attrs
import psycopg
from psycopg.rows import dict_row

from greenroom.domain import Item, Message, Session, SessionSummary, SubSession
from greenroom.errors import InvalidRequest, SessionExists, SessionNotFound

from . import _rows
from ._pg_search import search_sessions as search_sessions  # decision 0026

Conn = psycopg.Connection[Any]
ItemRow = tuple[str, str | None, str]  # (kind, role, body JSON): serialised by the caller

COLUMNS = ["session_id", *_rows.SESSION_COLUMNS[1:]]  # "id" is session_id here
_SELECT = ", ".join(["session_id AS id", *_rows.SESSION_COLUMNS[1:]])
INSERT_SESSION = (
    f"INSERT INTO gr_sessions ({', '.join(COLUMNS)}) VALUES ({', '.join('%s' for _ in COLUMNS)})"
)
_UPDATABLE = [c for c in COLUMNS if c not in ("session_id", "parent_id", "created_at")]
UPSERT_METADATA = (
    INSERT_SESSION
    + " ON CONFLICT (session_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _UPDATABLE)
    + " WHERE gr_sessions.deleted_at IS NULL"
)


def require_session(conn: Conn, session_id: str, *, lock: bool = False) -> None:
    """SessionNotFound unless the session exists and is not deleted. ``lock``: hold its row
    until the commit, so appends to one history from several connections take turns."""
    suffix = " FOR UPDATE" if lock else ""
    row = conn.execute(
        "SELECT 1 FROM gr_sessions WHERE session_id = %s AND deleted_at IS NULL" + suffix,
        (session_id,),
    ).fetchone()
    if row is None:
        raise SessionNotFound(session_id)


def insert_session(conn: Conn, session: Session) -> Session:
    if not session.id:
        raise InvalidRequest("session id is empty", path="$.id")
    # A tombstone counts: a deleted session's id is never used again.
    if conn.execute("SELECT 1 FROM gr_sessions WHERE session_id = %s", (session.id,)).fetchone():
        raise SessionExists(f"session already exists: {session.id}")
    conn.execute(INSERT_SESSION, _rows.session_to_row(session))
    conn.execute("INSERT INTO gr_heads (session_id) VALUES (%s)", (session.id,))
    items = [insert_item(conn, session.id, pos, item) for pos, item in enumerate(session.items)]
    return attrs.evolve(session, items=tuple(items))


def upsert_session(conn: Conn, row: tuple[Any, ...]) -> None:
    cursor = conn.execute(UPSERT_METADATA, row)
    if cursor.rowcount == 0:  # a tombstone: the id is gone for good
        raise SessionNotFound(str(row[0]))
    conn.execute("INSERT INTO gr_heads (session_id) VALUES (%s) ON CONFLICT DO NOTHING", (row[0],))


def insert_item(conn: Conn, session_id: str, pos: int, item: Item) -> Item:
    sub_id = None
    if isinstance(item, SubSession):
        sub = insert_session(conn, attrs.evolve(item.session, parent_id=session_id))
        sub_id = sub.id
        item = SubSession(sub)
    kind, role, body = _rows.item_to_row(item)
    row = conn.execute(
        "INSERT INTO gr_items (session_id, pos, kind, role, body, sub_session_id)"
        " VALUES (%s, %s, %s, %s, %s, %s) RETURNING item_id",
        (session_id, pos, kind, role, body, sub_id),
    ).fetchone()
    if isinstance(item, Message):
        return attrs.evolve(item, id=int(row[0]) if row else 0)
    return item


def append_row(conn: Conn, session_id: str, row: ItemRow) -> int:
    """Append one history item at the next position; its id."""
    require_session(conn, session_id, lock=True)
    kind, role, body = row
    inserted = conn.execute(
        "INSERT INTO gr_items (session_id, pos, kind, role, body)"
        " SELECT %s, COALESCE(MAX(pos) + 1, 0), %s, %s, %s FROM gr_items WHERE session_id = %s"
        " RETURNING item_id",
        (session_id, kind, role, body, session_id),
    ).fetchone()
    return int(inserted[0]) if inserted else 0


def append_item(conn: Conn, session_id: str, item: Item) -> int:
    require_session(conn, session_id, lock=True)
    (pos,) = conn.execute(
        "SELECT COALESCE(MAX(pos) + 1, 0) FROM gr_items WHERE session_id = %s", (session_id,)
    ).fetchone() or (0,)
    stored = insert_item(conn, session_id, int(pos), item)
    return stored.id if isinstance(stored, Message) else 0


def update_message(
    conn: Conn, session_id: str, message_id: int, role: str | None, body: str
) -> bool:
    cursor = conn.execute(
        "UPDATE gr_items SET role = %s, body = %s WHERE item_id = %s AND session_id = %s"
        " AND kind = 'message'",
        (role, body, message_id, session_id),
    )
    return cursor.rowcount > 0


def set_fields(conn: Conn, session_id: str, fields: Mapping[str, Any]) -> None:
    """One UPDATE of the session's row: named columns to new values."""
    assignments = ", ".join(f"{column} = %s" for column in fields)
    cursor = conn.execute(
        f"UPDATE gr_sessions SET {assignments} WHERE session_id = %s AND deleted_at IS NULL",
        (*fields.values(), session_id),
    )
    if cursor.rowcount == 0:
        raise SessionNotFound(session_id)


def titles(conn: Conn) -> list[str]:
    rows = conn.execute("SELECT title FROM gr_sessions WHERE deleted_at IS NULL").fetchall()
    return [r[0] for r in rows]


def count_sessions(conn: Conn) -> int:
    row = conn.execute(
        "SELECT COUNT(*) FROM gr_sessions WHERE parent_id IS NULL AND deleted_at IS NULL"
    ).fetchone()
    return int(row[0]) if row else 0


def tree(conn: Conn, session_id: str) -> list[str]:
    """The session and its live sub-sessions, at any depth; SessionNotFound if it is gone."""
    rows = conn.execute(
        "WITH RECURSIVE tree(id) AS (SELECT session_id FROM gr_sessions WHERE session_id = %s"
        " AND deleted_at IS NULL UNION ALL SELECT s.session_id FROM gr_sessions s"
        " JOIN tree ON s.parent_id = tree.id WHERE s.deleted_at IS NULL) SELECT id FROM tree",
        (session_id,),
    ).fetchall()
    if not rows:
        raise SessionNotFound(session_id)
    return [r[0] for r in rows]


def delete_tree(conn: Conn, session_id: str) -> list[str]:
    """Tombstone the session and its sub-sessions: ``deleted_at`` set, epoch + 1 and owner
    released (so no writer, zombie or sweeper of the old epoch writes it again), and their
    history and records removed (the log is kept). The ids deleted."""
    ids = tree(conn, session_id)
    conn.execute("UPDATE gr_sessions SET deleted_at = now() WHERE session_id = ANY(%s)", (ids,))
    conn.execute(
        "UPDATE gr_heads SET epoch = epoch + 1, owner_node = NULL, owner_inc = NULL,"
        " state = 'idle' WHERE session_id = ANY(%s)",
        (ids,),
    )
    # The log stays (until retention): its last event is the session_exited the owner
    # committed just before (same writer, in order), which ends the other nodes' mirrors.
    for table in ("gr_items", "gr_turns", "gr_tool_calls", "gr_idempotency"):
        conn.execute(f"DELETE FROM {table} WHERE session_id = ANY(%s)", (ids,))
    # A parent's reference to a deleted sub-session goes too (SQLite: ON DELETE SET NULL).
    conn.execute("DELETE FROM gr_items WHERE sub_session_id = ANY(%s)", (ids,))
    return ids


def load_session(conn: Conn, session_id: str) -> Session:
    row = (
        conn.cursor(row_factory=dict_row)
        .execute(
            f"SELECT {_SELECT} FROM gr_sessions WHERE session_id = %s AND deleted_at IS NULL",
            (session_id,),
        )
        .fetchone()
    )
    if row is None:
        raise SessionNotFound(session_id)
    items: list[Item] = []
    for item_id, kind, body, sub_id in conn.execute(
        "SELECT item_id, kind, body, sub_session_id FROM gr_items WHERE session_id = %s"
        " ORDER BY pos",
        (session_id,),
    ).fetchall():
        if kind == "sub_session":
            if sub_id is None:
                continue
            try:
                items.append(SubSession(load_session(conn, sub_id)))
            except SessionNotFound:
                continue
        else:
            items.append(_rows.row_to_item(kind, body, item_id))
    return _rows.row_to_session(cast(Any, row), tuple(items))


_COUNT_VISIBLE = """
WITH RECURSIVE tree(root, id) AS (
    SELECT session_id, session_id FROM gr_sessions WHERE parent_id IS NULL AND deleted_at IS NULL
    UNION ALL
    SELECT tree.root, s.session_id FROM gr_sessions s JOIN tree ON s.parent_id = tree.id
    WHERE s.deleted_at IS NULL
)
SELECT tree.root, COUNT(i.item_id) FROM tree
JOIN gr_items i ON i.session_id = tree.id AND i.kind = 'message' AND i.role <> 'system'
GROUP BY tree.root
"""


def list_sessions(conn: Conn) -> list[SessionSummary]:
    counts = {r[0]: int(r[1]) for r in conn.execute(_COUNT_VISIBLE).fetchall()}
    rows = conn.execute(
        "SELECT inserted, session_id, title, created_at, input_tokens, output_tokens,"
        " working_dir, starred, agent_file, agent_name FROM gr_sessions"
        " WHERE parent_id IS NULL AND deleted_at IS NULL"
    ).fetchall()
    return _rows.summaries_newest_first(rows, counts)
