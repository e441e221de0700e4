"""Reading docker-agent's session database (``~/.cagent/session.db``), read-only, a page of
sessions at a time.

The schema is docker-agent's ``pkg/session``: a ``sessions`` table grown by numbered entries of
a ``migrations`` table (001 ... 019 known here), and ``session_items`` (migration 014) holding
each session's history in ``position`` order: ``message`` rows (``message_json``, a
``chat.Message``), ``subsession`` rows (a reference to another ``sessions`` row, whose
``parent_id`` names its parent) and ``summary`` rows. A session without items may still keep
its history in the older ``sessions.messages`` JSON column.

The file is opened with ``mode=ro`` (nothing is written, docker-agent may keep running: SQLite's
WAL gives each read a consistent snapshot). Whatever is not such a database is refused before
any session is read, naming the file and what is wrong; a row docker-agent could not read
either is reported by its id and the column, and the other sessions are still read.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

from greenroom.errors import InvalidRequest, NewerDatabase, NotADatabase

from . import _docker_agent_map as m

# docker-agent's migrations by id (pkg/session/migrations.go); 015 is data only, 019 drops
# columns this reader never needs.
KNOWN_MIGRATIONS = {
    1: "001_add_tools_approved_column",
    2: "002_add_usage_column",
    3: "003_add_output_tokens_column",
    4: "004_add_title_column",
    5: "005_add_cost_column",
    6: "006_add_send_user_message_column",
    7: "007_add_max_iterations_column",
    8: "008_add_working_dir_column",
    9: "009_add_starred_column",
    10: "010_add_permissions_column",
    11: "011_add_agent_model_overrides_column",
    12: "012_add_custom_models_used_column",
    13: "013_add_thinking_column",
    14: "014_normalize_session_items",
    15: "015_migrate_messages_to_session_items",
    16: "016_add_branching_columns",
    17: "017_add_split_diff_view_column",
    18: "018_add_session_items_type_index",
    19: "019_drop_branch_and_split_diff_columns",
}
SESSION_COLUMNS = (
    "id",
    "created_at",
    "title",
    "tools_approved",
    "input_tokens",
    "output_tokens",
    "cost",
    "working_dir",
    "permissions",
    "max_iterations",
    "agent_model_overrides",
    "custom_models_used",
    "starred",
    "thinking",
    "parent_id",
)
ITEM_COLUMNS = (
    "position",
    "item_type",
    "agent_name",
    "message_json",
    "implicit",
    "subsession_id",
    "summary_text",
)
GREENROOM_APPLICATION_ID = 0x67726D31  # greenroom's own SQLite files: a common mix-up


@attrs.frozen
class Loaded:
    """One root session read: its greenroom JSON, or why it could not be read."""

    session_id: str
    where: str  # "PATH: sessions row 'ID'"
    data: dict[str, Any] | None
    error: str = ""
    dropped: Counter[str] = attrs.field(factory=Counter)


class DockerAgentDatabase:
    """An open docker-agent session database. Use :meth:`open`; one thread at a time."""

    def __init__(self, path: Path, conn: sqlite3.Connection, legacy_column: bool) -> None:
        self.path = path
        self._conn = conn
        self._legacy = legacy_column

    @classmethod
    def open(cls, path: str | Path, *, allow_newer: bool = False) -> DockerAgentDatabase:
        """Open ``path`` read-only and check it is a docker-agent session database this code
        reads.

        Raises:
            NotADatabase: missing, not SQLite, not docker-agent's, or older than migration 014.
            NewerDatabase: a migration this code does not know (unless ``allow_newer``).
        """
        where = Path(path).expanduser().absolute()
        if not where.is_file():
            raise NotADatabase(f"{where}: no such file (docker-agent keeps ~/.cagent/session.db)")
        try:
            conn = sqlite3.connect(
                f"{where.as_uri()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise NotADatabase(f"{where}: cannot open it read-only ({exc})") from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA query_only = ON")
            legacy = _check_schema(where, conn, allow_newer)
        except sqlite3.Error as exc:
            conn.close()
            raise NotADatabase(f"{where} is not a readable SQLite database ({exc})") from None
        except BaseException:
            conn.close()
            raise
        return cls(where, conn, legacy)

    def close(self) -> None:
        self._conn.close()

    def count_roots(self) -> int:
        row = self._conn.execute(
            "SELECT COUNT(*) FROM sessions WHERE parent_id IS NULL OR parent_id = ''"
        ).fetchone()
        return int(row[0])

    def next_page(self, after: str, limit: int) -> list[Loaded]:
        """The root sessions (no parent) whose id sorts after ``after``, at most ``limit``, in
        id order: a keyset page, so memory holds one page whatever the database's size."""
        ids = [
            str(r[0])
            for r in self._conn.execute(
                "SELECT id FROM sessions WHERE (parent_id IS NULL OR parent_id = '') AND id > ?"
                " ORDER BY id LIMIT ?",
                (after, limit),
            )
        ]
        return [self.load(session_id) for session_id in ids]

    def load(self, session_id: str) -> Loaded:
        where = f"{self.path}: sessions row {session_id!r}"
        dropped: Counter[str] = Counter()
        try:
            data = self._session(session_id, "$", dropped, 0, set())
        except InvalidRequest as exc:
            return Loaded(session_id, where, None, str(exc), dropped)
        if data is None:  # deleted between the page's query and this read
            return Loaded(session_id, where, None, "the row is gone (deleted meanwhile)", dropped)
        return Loaded(session_id, where, data, "", dropped)

    def _session(
        self, session_id: str, path: str, dropped: Counter[str], depth: int, seen: set[str]
    ) -> dict[str, Any] | None:
        if depth >= m.MAX_DEPTH or session_id in seen:
            raise InvalidRequest(f"{path}: sub-sessions form a loop or nest too deep", path=path)
        seen.add(session_id)
        columns = ", ".join(SESSION_COLUMNS) + (", messages" if self._legacy else "")
        row = self._conn.execute(
            f"SELECT {columns} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        items = self._items(session_id, path, dropped, depth, seen)
        if not items and self._legacy and row["messages"] not in (None, "", "[]"):
            raw = m.json_text(row["messages"], [], f"{path}.messages (the legacy column)")
            items = m.legacy_items(raw, f"{path}.messages", dropped, depth + 1)
        return m.session_json(dict(row), items, path)

    def _items(
        self, session_id: str, path: str, dropped: Counter[str], depth: int, seen: set[str]
    ) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            f"SELECT {', '.join(ITEM_COLUMNS)} FROM session_items WHERE session_id = ?"
            " ORDER BY position, id",
            (session_id,),
        ).fetchall()  # one session's rows: the sub-session reads below reuse the connection
        items: list[dict[str, Any]] = []
        for row in rows:
            at = f"{path}.messages[{len(items)}]"
            kind = row["item_type"]
            if kind == "message":
                raw = m.json_text(row["message_json"], None, f"{at}.message_json")
                items.append(m.message_item(row["agent_name"], row["implicit"], raw, at, dropped))
            elif kind == "subsession":
                sub_id = row["subsession_id"]
                sub = None
                if sub_id:
                    sub = self._session(str(sub_id), f"{at}.sub_session", dropped, depth + 1, seen)
                if sub is None:
                    dropped["sub-session references to deleted sessions"] += 1
                else:
                    items.append({"sub_session": sub})
            elif kind == "summary":
                items.append(m.summary_item(row["summary_text"], None, f"{at}.summary"))
            else:
                dropped[f"history items of unknown type {kind!r}"] += 1
        return items


def _check_schema(path: Path, conn: sqlite3.Connection, allow_newer: bool) -> bool:
    """Refuse what this reader cannot read; returns whether ``sessions.messages`` exists."""
    if conn.execute("PRAGMA application_id").fetchone()[0] == GREENROOM_APPLICATION_ID:
        raise NotADatabase(
            f"{path} is a greenroom database, not docker-agent's; to copy sessions between "
            "greenroom stores use greenroom export and greenroom import jsonl"
        )
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = {"sessions", "migrations", "session_items"} - tables
    if {"sessions", "migrations"} & missing:
        raise NotADatabase(
            f"{path} is not a docker-agent session database: it has no "
            f"{' or '.join(sorted({'sessions', 'migrations'} & missing))} table"
        )
    applied = {
        int(r[0]): str(r[1]) for r in conn.execute("SELECT id, name FROM migrations ORDER BY id")
    }
    unknown = {i: n for i, n in applied.items() if KNOWN_MIGRATIONS.get(i) != n}
    if unknown and not allow_newer:
        first = min(unknown)
        raise NewerDatabase(
            f"{path}: docker-agent migration {first} ({unknown[first]!r}) is newer than this "
            f"greenroom knows (up to {max(KNOWN_MIGRATIONS)}, "
            f"{KNOWN_MIGRATIONS[max(KNOWN_MIGRATIONS)]!r}); update greenroom, or pass "
            "--allow-newer-schema to read the columns it knows"
        )
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(sessions)")}
    lacking = [c for c in SESSION_COLUMNS if c not in columns]
    if "session_items" not in tables:
        lacking.append("(table session_items)")
    else:
        item_columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(session_items)")}
        lacking += [f"session_items.{c}" for c in ITEM_COLUMNS if c not in item_columns]
    if lacking:
        raise NotADatabase(
            f"{path}: a docker-agent database older than migration 014, or damaged: it lacks "
            f"{', '.join(lacking)}; open it once with a current docker-agent (which migrates "
            "it) and import again"
        )
    return "messages" in columns
