"""SQLite store faults: every way opening a file can fail gives a clear DatabaseError.

A clear error names the file and says what to do, and carries no chained low-level exception
(raised directly or ``from None``), so the command line can print its message instead of a
traceback. Refusing a file never changes it. Real clock throughout (the store uses threads).
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import greenroom.persistence._group_commit as group_commit
from greenroom.domain import Message, Session, SubSession
from greenroom.errors import (
    DatabaseError,
    DatabaseInUse,
    DatabaseReadOnly,
    MessageNotFound,
    NewerDatabase,
    NotADatabase,
    SessionNotFound,
    StoreError,
)
from greenroom.persistence import open_sqlite_store
from greenroom.persistence._sqlite_open import APPLICATION_ID, migrations
from tests.slowness import slow

CHILD = Path(__file__).with_name("_store_child.py")


def assert_clear(exc: DatabaseError, path: Path, *hints: str) -> None:
    assert str(path) in exc.message
    for hint in hints:
        assert hint in exc.message
    assert exc.__cause__ is None
    assert exc.__context__ is None or exc.__suppress_context__


async def open_fails(path: Path | str, expected: type[DatabaseError]) -> DatabaseError:
    with pytest.raises(expected) as caught:
        async with open_sqlite_store(path):
            pass
    return caught.value


async def greenroom_db(path: Path, *titles: str) -> None:
    """A closed greenroom database at ``path`` holding sessions with ``titles``."""
    async with open_sqlite_store(path) as store:
        for title in titles:
            await store.add_session(Session.new(title=title))


def read_titles(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT title FROM sessions ORDER BY title").fetchall()
    conn.close()
    return [r[0] for r in rows]


# --- files that are not greenroom databases ---------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(random.Random(7).randbytes(8192), id="random-bytes"),
        pytest.param(b"meeting notes\nbuy milk\n" * 200, id="text-file"),
    ],
)
async def test_a_file_that_is_not_a_database(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "greenroom.db"
    path.write_bytes(data)
    exc = await open_fails(path, NotADatabase)
    assert_clear(exc, path, "not a usable SQLite database", "choose another --db path")
    assert path.read_bytes() == data


def other_application_db(path: Path) -> bytes:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE contacts (name TEXT, phone TEXT)")
        conn.execute("INSERT INTO contacts VALUES ('ada', '555-0100')")
    conn.close()
    return path.read_bytes()


async def test_another_applications_database(tmp_path: Path) -> None:
    path = tmp_path / "contacts.db"
    before = other_application_db(path)
    exc = await open_fails(path, NotADatabase)
    assert_clear(exc, path, "another application", "choose another --db path")
    # Untouched: not even switched to WAL mode.
    assert path.read_bytes() == before
    assert not path.with_name("contacts.db-wal").exists()


def mark_newer(path: Path) -> bytes:
    newest = len(migrations()) + 1
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (newest, "from_the_future", "2099-01-01T00:00:00Z"),
        )
    conn.close()
    return path.read_bytes()


async def test_a_database_of_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    await greenroom_db(path, "kept")
    before = mark_newer(path)
    exc = await open_fails(path, NewerDatabase)
    newest = len(migrations()) + 1
    assert_clear(exc, path, f"schema {newest}", "upgrade greenroom")
    assert path.read_bytes() == before
    assert read_titles(path) == ["kept"]


# --- files and directories that cannot be written ----------------------------------------------


async def probe(path: Path) -> dict[str, Any]:
    """Open ``path`` and write a session in a child process that file modes apply to.

    These tests run as root, and root writes through file modes (CAP_DAC_OVERRIDE), so
    ``chmod`` alone proves nothing in this process. The child, when root, gives up the
    capabilities that override file modes before it opens the store (see _store_child.py).
    """
    with trio.fail_after(slow(30)):
        result = await trio.run_process(
            [sys.executable, str(CHILD), "probe", str(path)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr == b"", "a traceback instead of a clear error"
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


@pytest.mark.slow
async def test_a_read_only_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    assert await probe(path) == {"ok": True}  # the child can create and write a db here
    before = path.read_bytes()
    path.chmod(0o444)

    answer = await probe(path)
    assert answer["error"] == "DatabaseReadOnly"
    assert str(path) in answer["message"]
    assert "read-only" in answer["message"]
    assert "chmod" in answer["message"]
    assert path.read_bytes() == before

    path.chmod(0o644)  # the refused open left nothing behind that stops a writable one
    assert await probe(path) == {"ok": True}
    assert len(read_titles(path)) == 2


@pytest.mark.slow
async def test_an_empty_read_only_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    path.chmod(0o444)
    answer = await probe(path)
    assert answer["error"] == "DatabaseReadOnly"
    assert str(path) in answer["message"]
    assert path.read_bytes() == b""


@pytest.mark.slow
@pytest.mark.parametrize("existing", [False, True], ids=["new-db", "existing-db"])
async def test_a_read_only_directory(tmp_path: Path, existing: bool) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "store.db"
    if existing:
        # A database (and its lock file) made while the directory was writable.
        assert await probe(path) == {"ok": True}
    directory.chmod(0o555)
    try:
        answer = await probe(path)
    finally:
        directory.chmod(0o755)
    assert answer["error"] == "DatabaseReadOnly"
    assert str(path) in answer["message"]
    assert "not writable" in answer["message"]
    assert "permissions" in answer["message"]
    assert await probe(path) == {"ok": True}


async def test_a_directory_even_root_cannot_write() -> None:
    # sysfs refuses new files to everyone, root included: no chmod needed, no child process.
    path = Path("/sys/greenroom-test.db")
    exc = await open_fails(path, DatabaseReadOnly)
    assert_clear(exc, path, "not writable", "choose another --db path")


async def test_a_missing_parent_directory(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "dir" / "store.db"
    exc = await open_fails(path, DatabaseError)
    assert type(exc) is DatabaseError
    assert_clear(exc, path, "does not exist", "create it first")
    assert not (tmp_path / "no").exists()


async def test_a_directory_instead_of_a_file(tmp_path: Path) -> None:
    exc = await open_fails(tmp_path, DatabaseError)
    assert type(exc) is DatabaseError
    assert_clear(exc, tmp_path, "is a directory", "pass a file path")


# --- one store per file ----------------------------------------------------------------------


async def test_a_second_store_in_the_same_process(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with open_sqlite_store(path) as first:
        await first.add_session(Session.new(title="first"))
        exc = await open_fails(path, DatabaseInUse)
        assert_clear(exc, path, "already open in this process")
        assert await first.count_sessions() == 1  # the first store is unharmed
    async with open_sqlite_store(path) as again:
        assert await again.titles() == ["first"]


async def read_line(stream: trio.abc.ReceiveStream) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some()
        assert chunk, f"child closed its output after {data!r}"
        data += chunk
    return data.decode().strip()


@pytest.mark.slow
async def test_a_second_store_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    command = [sys.executable, str(CHILD), "hold", str(path)]
    with trio.fail_after(slow(30)):
        async with trio.open_nursery() as nursery:
            run = partial(trio.run_process, command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            process: trio.Process = await nursery.start(run)
            assert process.stdin is not None
            assert process.stdout is not None
            async with process.stdin, process.stdout:
                assert await read_line(process.stdout) == f"ready {process.pid}"
                exc = await open_fails(path, DatabaseInUse)
                assert_clear(exc, path, f"pid {process.pid}", "stop that server")
        assert process.returncode == 0
    async with open_sqlite_store(path) as store:  # free again once the holder exits
        assert await store.count_sessions() == 0


# --- reopening -------------------------------------------------------------------------------


def applied_migrations(path: Path) -> list[tuple[int, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT version, name, applied_at FROM schema_migrations").fetchall()
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()
    return rows


async def test_reopening_migrates_nothing_twice_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with open_sqlite_store(path) as store:
        stored = await store.add_session(Session.new(title="one", items=(Message.user("hi"),)))
    first = applied_migrations(path)
    assert [(v, n) for v, n, _ in first] == [(v, n) for v, n, _ in migrations()]

    for _ in range(2):
        async with open_sqlite_store(path) as store:
            assert await store.get_session(stored.id) == stored
            again = Message.user("again")
            message_id = await store.add_message(stored.id, again)
            stored = await store.get_session(stored.id)
            assert stored.items[-1] == Message(again.message, id=message_id)
        assert applied_migrations(path) == first
    assert len(stored.items) == 3


# --- group commit ----------------------------------------------------------------------------


async def test_a_failing_job_fails_alone_in_its_batch(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with open_sqlite_store(path) as store:
        mine = await store.add_session(Session.new(title="mine", items=(Message.user("m"),)))
        theirs = await store.add_session(Session.new(title="theirs", items=(Message.user("t"),)))
        their_message = theirs.items[0]
        assert isinstance(their_message, Message)
        ids: dict[int, int] = {}
        failures: list[BaseException] = []

        async def add(n: int) -> None:
            ids[n] = await store.add_message(mine.id, Message.user(f"m{n}"))

        async def hijack() -> None:
            try:
                await store.update_message(mine.id, their_message.id, Message.user("hijacked"))
            except MessageNotFound as exc:
                failures.append(exc)

        async def clash() -> None:
            # Several statements, the last one failing: its savepoint undoes the first ones.
            sub = SubSession(Session.new(session_id=theirs.id))
            try:
                await store.add_session(Session.new(session_id="clash", items=(sub,)))
            except StoreError as exc:
                failures.append(exc)

        # A first job that holds the writer thread until released: everything sent meanwhile
        # queues up and is committed together, in the second transaction. (A raw job: the
        # Store methods give no way to hold the writer.)
        holder = Holder()
        batches = store.batches
        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.group_commit.write, holder)
                await holder.started()
                for n in range(10):
                    nursery.start_soon(add, n)
                    if n == 3:
                        nursery.start_soon(clash)
                    if n == 5:
                        nursery.start_soon(hijack)
                await trio.testing.wait_all_tasks_blocked()  # all 12 jobs are queued
                holder.release.set()

        assert store.batches - batches == 2  # the holder, then the 12 others in one transaction
        assert sorted(type(f).__name__ for f in failures) == ["MessageNotFound", "SessionExists"]
        with pytest.raises(SessionNotFound):
            await store.get_session("clash")
        assert len(set(ids.values())) == 10
        after = [m for m in (await store.get_session(mine.id)).items if isinstance(m, Message)]
        assert after[0] == mine.items[0]
        # Stored in id order, each under the id its caller got; nothing of the hijack.
        assert [m.id for m in after[1:]] == sorted(ids.values())
        assert {m.content: m.id for m in after[1:]} == {f"m{n}": i for n, i in ids.items()}
        assert await store.get_session(theirs.id) == theirs


class Holder:
    """A private job that keeps the writer thread busy until released."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self, _: sqlite3.Connection) -> None:
        self.running.set()
        self.release.wait(20)

    async def started(self) -> None:
        assert await trio.to_thread.run_sync(self.running.wait, 20)


async def test_a_cancelled_caller_leaves_the_store_working(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "store.db") as store:
        session = await store.add_session(Session.new())
        holder = Holder()
        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.group_commit.write, holder)
                await holder.started()
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await store.add_message(session.id, Message.user("given up on"))
                assert scope.cancelled_caught
                holder.release.set()
            # The abandoned write was committed all the same, and the store carries on.
            next_id = await store.add_message(session.id, Message.user("next"))
        items = (await store.get_session(session.id)).items
        assert [m.content for m in items if isinstance(m, Message)] == ["given up on", "next"]
        assert isinstance(items[-1], Message)
        assert items[-1].id == next_id


async def test_backpressure_and_closing_while_producers_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_commit, "QUEUE_SIZE", 3)
    async with open_sqlite_store(tmp_path / "store.db") as store:
        session = await store.add_session(Session.new())
        holder = Holder()
        done: list[int] = []
        refused: list[StoreError] = []

        async def add(n: int) -> None:
            try:
                done.append(await store.add_message(session.id, Message.user(f"m{n}")))
            except StoreError as exc:
                refused.append(exc)

        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.group_commit.write, holder)
                await holder.started()
                for n in range(6):
                    nursery.start_soon(add, n)
                await trio.testing.wait_all_tasks_blocked()
                # The holder and two messages fill the 3 slots; 4 producers wait for room.
                assert store.group_commit.statistics().tasks_waiting == 4
                nursery.start_soon(store.aclose)
                await trio.testing.wait_all_tasks_blocked()
                holder.release.set()
        # What was queued before the close committed; the producers still waiting were
        # refused once room came free, and nothing hangs.
        assert len(done) == 2
        assert len(refused) == 4
        assert all("closed" in exc.message for exc in refused)
    async with open_sqlite_store(tmp_path / "store.db") as store:
        assert len((await store.get_session(session.id)).items) == 2
