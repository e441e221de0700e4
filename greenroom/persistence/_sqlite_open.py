"""Opening a greenroom SQLite file: the process lock, pragmas, numbered migrations, and clear
errors (naming the file and what to do) for every way that can go wrong."""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import sqlite3
from pathlib import Path

from greenroom.errors import (
    DatabaseError,
    DatabaseInUse,
    DatabaseReadOnly,
    NotADatabase,
)

from . import _migrations

# "grm1" — marks a file as a greenroom database, so another application's database is refused.
APPLICATION_ID = 0x67726D31


def migrations() -> list[_migrations.Migration]:
    """(version, name, sql) of every bundled SQLite migration, in order."""
    return _migrations.bundled("greenroom.persistence.migrations")


def _directory_missing(path: Path) -> DatabaseError:
    return DatabaseError(
        f"cannot open {path}: directory {path.parent} does not exist; create it first"
    )


def _directory_read_only(path: Path) -> DatabaseReadOnly:
    return DatabaseReadOnly(
        f"cannot write {path}: its directory {path.parent} is not writable (SQLite keeps "
        "its -wal, -shm and lock files next to the database); fix its permissions or "
        "choose another --db path"
    )


def check_access(path: Path) -> None:
    """Refuse, before SQLite touches anything, a path the store could not write.

    SQLite opens a file it may not write read-only without a word and only fails at the
    first write (after leaving -wal and -shm files behind); this says so at once.
    """
    if not path.parent.is_dir():
        raise _directory_missing(path)
    if path.is_dir():
        raise DatabaseError(f"cannot open {path}: it is a directory; pass a file path")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise _directory_read_only(path)
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise DatabaseReadOnly(
            f"cannot write {path}: the file is read-only; make it writable "
            f"(chmod u+rw {path}) or choose another --db path"
        )


def acquire_process_lock(path: Path) -> int:
    """Hold an exclusive lock on ``<db>.lock`` for the life of the store (one server per file)."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileNotFoundError, NotADirectoryError):
        raise _directory_missing(path) from None
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise _directory_read_only(path) from None
        raise DatabaseError(f"cannot open {path}: {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if holder == str(os.getpid()):
            raise DatabaseInUse(
                f"{path} is already open in this process; close that store first or pass "
                "another --db path"
            ) from None
        raise DatabaseInUse(
            f"{path} is in use by another greenroom process (pid {holder}); "
            "stop that server or pass another --db path"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def release_process_lock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection with greenroom's pragmas. Used from one thread at a time."""
    if readonly:
        conn = sqlite3.connect(
            f"{path.as_uri()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA foreign_keys = ON")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    return conn


def open_writer(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) and migrate ``path``; returns the writer connection."""
    try:
        conn = connect(path)
    except sqlite3.OperationalError as exc:
        raise _explain(path, exc) from None
    try:
        # Identity first: a file that is not ours is refused before anything writes to it
        # (switching to WAL rewrites the header).
        _check_identity(path, conn)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        _check_writable(conn)
        _migrate(path, conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise _explain(path, exc) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _explain(path: Path, exc: sqlite3.Error) -> DatabaseError:
    text = str(exc)
    if "not a database" in text or "malformed" in text or "encrypted" in text:
        return NotADatabase(
            f"{path} is not a usable SQLite database ({text}); move it away or choose "
            "another --db path"
        )
    if "readonly" in text or "read-only" in text or "unable to open" in text:
        return DatabaseReadOnly(
            f"cannot write {path} ({text}); check the permissions of the file and its "
            "directory, or choose another --db path"
        )
    return DatabaseError(f"cannot open {path}: {text}")


def _check_writable(conn: sqlite3.Connection) -> None:
    # A backstop for check_access: SQLite falls back to read-only when it cannot write the
    # file. Writing user_version's own value in a rolled-back transaction changes nothing on
    # disk but fails on such a connection ("attempt to write a readonly database").
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows if not r[0].startswith("sqlite_")}


def _check_identity(path: Path, conn: sqlite3.Connection) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id == APPLICATION_ID:
        return
    if app_id != 0 or _tables(conn):
        raise NotADatabase(
            f"{path} is an SQLite database of another application, not greenroom's; "
            "choose another --db path"
        )


def _migrate(path: Path, conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}

    def apply(migration: _migrations.Migration) -> None:
        version, name, sql = migration
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (version, name, dt.datetime.now(dt.UTC).isoformat()),
            )
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    _migrations.run(
        migrations(), applied, apply, where=str(path), instead="choose another --db path"
    )


def _statements(sql: str) -> list[str]:
    # Split a migration file into statements (sqlite3.complete_statement knows where one ends).
    statements, current = [], ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip() and not current.strip().startswith("--"):
        statements.append(current.strip())
    return statements
