"""A docker-agent session database, built the way docker-agent builds one: the first
``sessions`` table, then its numbered migrations applied one by one and recorded in
``migrations`` (written here from the schema of docker-agent's pkg/session, not copied), then
rows shaped as its store writes them (booleans as 0/1, times as RFC 3339 text, permissions and
overrides as JSON text, each message a ``chat.Message`` JSON in ``session_items``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

# (id, name, statements): the schema as docker-agent's migrations grow it.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "001_add_tools_approved_column",
        ["ALTER TABLE sessions ADD tools_approved BOOLEAN DEFAULT 0"],
    ),
    (2, "002_add_usage_column", ["ALTER TABLE sessions ADD input_tokens INTEGER DEFAULT 0"]),
    (
        3,
        "003_add_output_tokens_column",
        ["ALTER TABLE sessions ADD output_tokens INTEGER DEFAULT 0"],
    ),
    (4, "004_add_title_column", ["ALTER TABLE sessions ADD title TEXT DEFAULT ''"]),
    (5, "005_add_cost_column", ["ALTER TABLE sessions ADD cost REAL DEFAULT 0"]),
    (
        6,
        "006_add_send_user_message_column",
        ["ALTER TABLE sessions ADD send_user_message BOOLEAN DEFAULT 1"],
    ),
    (
        7,
        "007_add_max_iterations_column",
        ["ALTER TABLE sessions ADD max_iterations INTEGER DEFAULT 0"],
    ),
    (8, "008_add_working_dir_column", ["ALTER TABLE sessions ADD working_dir TEXT DEFAULT ''"]),
    (9, "009_add_starred_column", ["ALTER TABLE sessions ADD starred BOOLEAN DEFAULT 0"]),
    (10, "010_add_permissions_column", ["ALTER TABLE sessions ADD permissions TEXT DEFAULT ''"]),
    (
        11,
        "011_add_agent_model_overrides_column",
        ["ALTER TABLE sessions ADD agent_model_overrides TEXT DEFAULT '{}'"],
    ),
    (
        12,
        "012_add_custom_models_used_column",
        ["ALTER TABLE sessions ADD custom_models_used TEXT DEFAULT '[]'"],
    ),
    (13, "013_add_thinking_column", ["ALTER TABLE sessions ADD thinking BOOLEAN DEFAULT 1"]),
    (
        14,
        "014_normalize_session_items",
        [
            "ALTER TABLE sessions ADD parent_id TEXT REFERENCES sessions(id) ON DELETE CASCADE",
            "CREATE TABLE session_items (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
            " position INTEGER NOT NULL, item_type TEXT NOT NULL, agent_name TEXT,"
            " message_json TEXT, implicit BOOLEAN DEFAULT 0,"
            " subsession_id TEXT REFERENCES sessions(id) ON DELETE SET NULL, summary_text TEXT)",
            "CREATE INDEX session_items_by_position ON session_items(session_id, position)",
        ],
    ),
    (15, "015_migrate_messages_to_session_items", []),
    (
        16,
        "016_add_branching_columns",
        [
            "ALTER TABLE sessions ADD branch_parent_session_id TEXT",
            "ALTER TABLE sessions ADD branch_parent_position INTEGER",
            "ALTER TABLE sessions ADD branch_created_at TEXT",
        ],
    ),
    (17, "017_add_split_diff_view_column", ["ALTER TABLE sessions ADD split_diff_view BOOLEAN"]),
    (
        18,
        "018_add_session_items_type_index",
        ["CREATE INDEX items_by_type ON session_items(session_id, item_type)"],
    ),
    (
        19,
        "019_drop_branch_and_split_diff_columns",
        [
            "ALTER TABLE sessions DROP COLUMN branch_parent_session_id",
            "ALTER TABLE sessions DROP COLUMN branch_parent_position",
            "ALTER TABLE sessions DROP COLUMN branch_created_at",
            "ALTER TABLE sessions DROP COLUMN split_diff_view",
        ],
    ),
]


def create(path: Path, *, upto: int = 19) -> sqlite3.Connection:
    """An empty docker-agent database at ``path`` migrated up to ``upto``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")  # as docker-agent opens it
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, messages TEXT, created_at TEXT)")
    conn.execute(
        "CREATE TABLE migrations (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
        " description TEXT, applied_at TEXT NOT NULL)"
    )
    for number, name, statements in MIGRATIONS[:upto]:
        for statement in statements:
            conn.execute(statement)
        record_migration(conn, number, name)
    return conn


def record_migration(conn: sqlite3.Connection, number: int, name: str) -> None:
    conn.execute(
        "INSERT INTO migrations (id, name, description, applied_at) VALUES (?, ?, '', ?)",
        (number, name, "2026-01-02T03:04:05Z"),
    )


def add_session(conn: sqlite3.Connection, session_id: str, **columns: Any) -> None:
    """A ``sessions`` row as docker-agent's AddSession / UpdateSession write it."""
    row: dict[str, Any] = {
        "id": session_id,
        "created_at": "2026-01-10T09:00:00Z",
        "tools_approved": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "title": "",
        "cost": 0.0,
        "send_user_message": 1,
        "max_iterations": 0,
        "working_dir": "",
        "starred": 0,
        "permissions": "",
        "agent_model_overrides": "{}",
        "custom_models_used": "[]",
        "thinking": 1,
        "parent_id": None,
    }
    row.update(columns)
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    conn.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", tuple(row.values()))


def add_message(
    conn: sqlite3.Connection,
    session_id: str,
    message: dict[str, Any],
    *,
    agent: str = "",
    implicit: bool = False,
) -> None:
    conn.execute(
        "INSERT INTO session_items (session_id, position, item_type, agent_name, message_json,"
        " implicit) VALUES (?, (SELECT COALESCE(MAX(position), -1) + 1 FROM session_items"
        " WHERE session_id = ?), 'message', ?, ?, ?)",
        (session_id, session_id, agent, json.dumps(message), int(implicit)),
    )


def add_sub_session_ref(conn: sqlite3.Connection, session_id: str, sub_id: str | None) -> None:
    conn.execute(
        "INSERT INTO session_items (session_id, position, item_type, subsession_id)"
        " VALUES (?, (SELECT COALESCE(MAX(position), -1) + 1 FROM session_items"
        " WHERE session_id = ?), 'subsession', ?)",
        (session_id, session_id, sub_id),
    )


def add_summary(conn: sqlite3.Connection, session_id: str, text: str) -> None:
    conn.execute(
        "INSERT INTO session_items (session_id, position, item_type, summary_text)"
        " VALUES (?, (SELECT COALESCE(MAX(position), -1) + 1 FROM session_items"
        " WHERE session_id = ?), 'summary', ?)",
        (session_id, session_id, text),
    )


def populate(conn: sqlite3.Connection) -> None:
    """The sessions the tests import (see each one's comment)."""
    # A whole conversation: tool call and result, a summary, a sub-agent's sub-session,
    # permissions, tokens, cost, starred.
    add_session(
        conn,
        "s-alpha",
        created_at="2026-01-10T09:00:00+01:00",
        title="Paris trip",
        starred=1,
        tools_approved=1,
        input_tokens=1200,
        output_tokens=340,
        cost=0.0125,
        working_dir="/home/me/trip",
        permissions=json.dumps({"allow": ["read_*"], "deny": ["shell"]}),
        agent_model_overrides=json.dumps({"root": "openai/gpt-4o"}),
        custom_models_used=json.dumps(["openai/gpt-4o"]),
        max_iterations=20,
    )
    add_message(
        conn,
        "s-alpha",
        {"role": "user", "content": "Plan Paris", "created_at": "2026-01-10T08:00:01Z"},
    )
    add_message(
        conn,
        "s-alpha",
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Weather first.",
            "thinking_signature": "sig-1",
            "thought_signature": "AAEC",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "tool_definitions": [{"name": "get_weather", "description": "weather"}],
            "created_at": "2026-01-10T08:00:03Z",
            "usage": {
                "input_tokens": 1000,
                "output_tokens": 40,
                "cached_input_tokens": 5,
                "cached_write_tokens": 0,
            },
            "model": "gpt-4o",
            "cost": 0.01,
        },
        agent="root",
    )
    add_message(
        conn,
        "s-alpha",
        {
            "role": "tool",
            "content": "12C, rain",
            "tool_call_id": "call_1",
            "is_error": False,
            "created_at": "2026-01-10T08:00:04Z",
        },
        agent="root",
    )
    add_summary(conn, "s-alpha", "The user plans a Paris trip; it rains.")
    add_session(conn, "s-alpha-sub", parent_id="s-alpha", title="research", input_tokens=7)
    add_message(conn, "s-alpha-sub", {"role": "user", "content": "Find museums"}, implicit=True)
    add_message(
        conn, "s-alpha-sub", {"role": "assistant", "content": "The Louvre."}, agent="researcher"
    )
    add_sub_session_ref(conn, "s-alpha", "s-alpha-sub")
    add_message(
        conn,
        "s-alpha",
        {"role": "assistant", "content": "Take an umbrella.", "cache_control": True},
        agent="root",
    )
    add_sub_session_ref(conn, "s-alpha", None)  # its sub-session was deleted: SET NULL

    # An older session: its history only in the legacy messages column (docker-agent's
    # migration 015 could not move it), booleans as Go's ParseBool text.
    legacy = [
        {"message": {"agentName": "", "message": {"role": "user", "content": "old question"}}},
        {
            "sub_session": {
                "id": "s-beta-sub",
                "title": "helper",
                "created_at": "2025-12-01T10:00:00Z",
                "messages": [
                    {
                        "message": {
                            "agentName": "helper",
                            "message": {"role": "assistant", "content": "helped"},
                        }
                    }
                ],
                "tools_approved": False,
                "thinking": True,
                "input_tokens": 3,
                "output_tokens": 4,
                "cost": 0,
            }
        },
        {
            "message": {
                "agentName": "root",
                "message": {"role": "assistant", "content": "old answer"},
            }
        },
        {"summary": "old summary", "cost": 0.002},
    ]
    add_session(
        conn,
        "s-beta",
        created_at="2025-12-01T10:00:00Z",
        title="Old",
        starred="true",
        thinking="false",
        messages=json.dumps(legacy),
    )

    # A user message with an attached file and an image.
    add_session(conn, "s-gamma", title="Attachments")
    add_message(
        conn,
        "s-gamma",
        {
            "role": "user",
            "content": "",
            "multi_content": [
                {"type": "text", "text": "What is in these?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"},
                },
                {
                    "type": "file",
                    "file": {"path": "/home/me/report.pdf", "mime_type": "application/pdf"},
                },
            ],
        },
    )

    # A row docker-agent itself could not read: its time is not RFC 3339.
    add_session(conn, "s-bad", created_at="yesterday", title="Broken")
