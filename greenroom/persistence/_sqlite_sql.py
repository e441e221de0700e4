"""The SQL of the SQLite store's sessions and history: functions of a connection, run on the
writer or reader threads. The same functions as :mod:`._pg_sql` (one
:class:`~._sql_store.SqlStore` serves both), in SQLite's dialect."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import attrs

from greenroom.domain import Item, Message, Session, SessionSummary, SubSession
from greenroom.errors import InvalidRequest, SessionExists, SessionNotFound

from . import _rows
from ._sqlite_search import search_sessions as search_sessions  # decision 0026


def require_session(conn: sqlite3.Connection, session_id: str) -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFound(session_id)


INSERT_SESSION = (
    f"INSERT INTO sessions ({', '.join(_rows.SESSION_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _rows.SESSION_COLUMNS)})"
)
UPDATABLE = [c for c in _rows.SESSION_COLUMNS if c not in ("id", "parent_id", "created_at")]
UPSERT_METADATA = (
    INSERT_SESSION
    + " ON CONFLICT(id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in UPDATABLE)
)
INSERT_HEAD = "INSERT OR IGNORE INTO heads (session_id) VALUES (?)"


def upsert_session(conn: sqlite3.Connection, row: tuple[Any, ...]) -> None:
    conn.execute(UPSERT_METADATA, row)
    conn.execute(INSERT_HEAD, (row[0],))  # cannot fail once the row is there


def delete_tree(conn: sqlite3.Connection, session_id: str) -> None:
    """Delete the session; its sub-sessions, items, heads and records go with it (ON DELETE
    CASCADE), and so does the log of the whole tree."""
    conn.execute(
        "WITH RECURSIVE tree(id) AS (SELECT ? UNION ALL"
        " SELECT sessions.id FROM sessions JOIN tree ON sessions.parent_id = tree.id)"
        " DELETE FROM events WHERE session_id IN (SELECT id FROM tree)",
        (session_id,),
    )
    if conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
        raise SessionNotFound(session_id)


def insert_session(conn: sqlite3.Connection, session: Session) -> Session:
    if not session.id:
        raise InvalidRequest("session id is empty", path="$.id")
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session.id,)).fetchone():
        raise SessionExists(f"session already exists: {session.id}")
    conn.execute(INSERT_SESSION, _rows.session_to_row(session))
    conn.execute("INSERT INTO heads (session_id) VALUES (?)", (session.id,))
    items: list[Item] = []
    for position, item in enumerate(session.items):
        items.append(insert_item(conn, session.id, position, item))
    return attrs.evolve(session, items=tuple(items))


def insert_item(conn: sqlite3.Connection, session_id: str, position: int, item: Item) -> Item:
    sub_id = None
    if isinstance(item, SubSession):
        sub = insert_session(conn, attrs.evolve(item.session, parent_id=session_id))
        sub_id = sub.id
        item = SubSession(sub)
    kind, role, body = _rows.item_to_row(item)
    cursor = conn.execute(
        "INSERT INTO items (session_id, position, kind, role, body, sub_session_id)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (session_id, position, kind, role, body, sub_id),
    )
    if isinstance(item, Message):
        return attrs.evolve(item, id=int(cursor.lastrowid or 0))
    return item


# The next position and the insert in one statement. An unknown session fails the foreign key,
# and SQLite undoes the failed statement on its own, so the job needs no savepoint.
APPEND_ROW = (
    "INSERT INTO items (session_id, position, kind, role, body)"
    " SELECT ?, COALESCE(MAX(position) + 1, 0), ?, ?, ? FROM items WHERE session_id = ?"
)


def append_row(conn: sqlite3.Connection, session_id: str, row: tuple[str, str | None, str]) -> int:
    kind, role, body = row
    try:
        cursor = conn.execute(APPEND_ROW, (session_id, kind, role, body, session_id))
    except sqlite3.IntegrityError:
        require_session(conn, session_id)
        raise
    return int(cursor.lastrowid or 0)


def append_item(conn: sqlite3.Connection, session_id: str, item: Item) -> int:
    row = conn.execute(
        "SELECT (SELECT COALESCE(MAX(position) + 1, 0) FROM items WHERE session_id = ?)"
        " FROM sessions WHERE id = ?",
        (session_id, session_id),
    ).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    stored = insert_item(conn, session_id, row[0], item)
    return stored.id if isinstance(stored, Message) else 0


def update_message(
    conn: sqlite3.Connection, session_id: str, message_id: int, role: str | None, body: str
) -> bool:
    cursor = conn.execute(
        "UPDATE items SET role = ?, body = ? WHERE id = ? AND session_id = ? AND kind = 'message'",
        (role, body, message_id, session_id),
    )
    return cursor.rowcount > 0


def set_fields(conn: sqlite3.Connection, session_id: str, fields: Mapping[str, Any]) -> None:
    """One UPDATE of the session's row: named columns to new values."""
    assignments = ", ".join(f"{column} = ?" for column in fields)
    cursor = conn.execute(
        f"UPDATE sessions SET {assignments} WHERE id = ?", (*fields.values(), session_id)
    )
    if cursor.rowcount == 0:
        raise SessionNotFound(session_id)


def titles(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT title FROM sessions")]


def count_sessions(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT COUNT(*) FROM sessions WHERE parent_id IS NULL").fetchone()
    return int(row[0])


def load_session(conn: sqlite3.Connection, session_id: str) -> Session:
    row = conn.execute(
        f"SELECT {', '.join(_rows.SESSION_COLUMNS)} FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    items: list[Item] = []
    for item_id, kind, body, sub_id in conn.execute(
        "SELECT id, kind, body, sub_session_id FROM items WHERE session_id = ? ORDER BY position",
        (session_id,),
    ).fetchall():
        if kind == "sub_session":
            if sub_id is None:
                continue  # the sub-session row is gone: skip the dangling reference
            try:
                items.append(SubSession(load_session(conn, sub_id)))
            except SessionNotFound:
                continue
        else:
            items.append(_rows.row_to_item(kind, body, item_id))
    return _rows.row_to_session(row, tuple(items))


COUNT_VISIBLE = """
WITH RECURSIVE tree(root, id) AS (
    SELECT id, id FROM sessions WHERE parent_id IS NULL
    UNION ALL
    SELECT tree.root, sessions.id FROM sessions JOIN tree ON sessions.parent_id = tree.id
)
SELECT tree.root, COUNT(items.id) FROM tree
JOIN items ON items.session_id = tree.id AND items.kind = 'message' AND items.role != 'system'
GROUP BY tree.root
"""


def list_sessions(conn: sqlite3.Connection) -> list[SessionSummary]:
    counts = dict(conn.execute(COUNT_VISIBLE).fetchall())
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: a tenth of the cost of sqlite3.Row at 10,000 rows
    rows = cursor.execute(
        "SELECT rowid, id, title, created_at, input_tokens, output_tokens, working_dir,"
        " starred, agent_file, agent_name FROM sessions WHERE parent_id IS NULL"
    ).fetchall()
    return _rows.summaries_newest_first(rows, counts)
