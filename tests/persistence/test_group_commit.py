"""The group-commit engine on its own (greenroom/persistence/_group_commit.py): batching, one
savepoint per job, delivery through the trio token (a cancelled caller, backpressure), the
commit listener and shutdown.

The first part drives the engine over a fake dialect (a list per transaction: no database), so
each rule is seen alone; the second runs the same batching, cancel and shutdown through both
SQL stores (SQLite, and PostgreSQL from tests/pg.py). A writer thread runs for real, so the
clock is real: every wait is bounded by ``fail_after``, and the order of steps comes from
``wait_all_tasks_blocked`` and threading events, never from sleeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from greenroom.domain import Message, Session
from greenroom.errors import SessionNotFound, StoreError
from greenroom.persistence import EventRow, GroupCommitWriter, SqliteStore, open_sqlite_store
from greenroom.persistence.postgres import PostgresStore
from tests.slowness import slow

from ..pg import postgres_store

# --- a fake dialect --------------------------------------------------------------------------


class Lost(Exception):
    """The fake driver's error: raised out of a transaction, it fails the whole batch."""


class Conn:
    """What a transaction of the fake database sees: the committed list, and its own."""

    def __init__(self, committed: list[Any]) -> None:
        self.rows = list(committed)
        self.in_transaction = True


class FakeBackend:
    errors: tuple[type[Exception], ...] = (Lost,)
    kept: tuple[type[Exception], ...] = ()
    where = "the fake database"
    closed_message = "the fake store is closed"
    thread_name = "greenroom-test-writer"

    def __init__(self) -> None:
        self.committed: list[Any] = []
        self.transactions = 0
        self.closed = False

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        conn = Conn(self.committed)
        yield conn
        self.committed = conn.rows
        self.transactions += 1

    @contextmanager
    def savepoint(self, conn: Conn, atomic: bool) -> Iterator[None]:
        mark = len(conn.rows)
        try:
            yield
        except Exception:
            del conn.rows[mark:]
            raise

    def check_transaction(self, conn: Conn, exc: Exception) -> None:
        if not conn.in_transaction:
            raise Lost(f"transaction rolled back: {exc}") from exc

    def flush_events(
        self, conn: Conn, rows: list[EventRow], failed: dict[str, str]
    ) -> dict[str, int]:
        heads: dict[str, int] = {}
        for row in rows:
            if row.session_id == "fenced":
                failed[row.session_id] = "fenced"
                continue
            conn.rows.append(("event", row.session_id, row.seq))
            heads[row.session_id] = row.seq
        return heads

    def before_commit(self, conn: Conn, heads: dict[str, int]) -> None:
        pass

    def translate(self, exc: Exception) -> Exception:
        return StoreError(f"translated: {exc}") if isinstance(exc, ValueError) else exc

    def close(self) -> None:
        self.closed = True


class Bug(BaseException):
    pass


class Commits:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, int], dict[str, str]]] = []

    def __call__(self, heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        self.calls.append((dict(heads), dict(failed)))


class Holder:
    """A job that keeps the writer thread busy until released."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self, conn: Any) -> str:
        self.running.set()
        self.release.wait(20)
        return "held"

    async def started(self) -> None:
        assert await trio.to_thread.run_sync(self.running.wait, 20)


@asynccontextmanager
async def engine(queue_size: int | None = None) -> AsyncIterator[GroupCommitWriter[Conn]]:
    writer = GroupCommitWriter(FakeBackend(), queue_size=queue_size)
    writer.start()
    try:
        yield writer
    finally:
        writer.shutdown()
        with trio.fail_after(slow(20)):
            await writer.stopped()


def put(value: Any) -> Callable[[Conn], Any]:
    def job(conn: Conn) -> Any:
        conn.rows.append(value)
        return value

    return job


def event(session_id: str, seq: int) -> EventRow:
    return EventRow(session_id, seq, 1, "warning", b"{}", 0.0)


def backend(writer: GroupCommitWriter[Conn]) -> FakeBackend:
    assert isinstance(writer.backend, FakeBackend)
    return writer.backend


async def test_what_queues_while_a_batch_commits_commits_in_the_next_one() -> None:
    async with engine() as writer:
        holder = Holder()
        results: dict[int, Any] = {}

        async def write(n: int) -> None:
            results[n] = await writer.write(put(n))

        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.write, holder)
                await holder.started()
                for n in range(10):
                    nursery.start_soon(write, n)
                await trio.testing.wait_all_tasks_blocked()
                assert writer.statistics().jobs_waiting == 11
                holder.release.set()
        assert results == {n: n for n in range(10)}
        assert writer.statistics().batches == 2  # the holder, then the ten together
        assert writer.statistics().jobs_waiting == 0
        assert sorted(backend(writer).committed) == list(
            range(10)
        )  # trio starts tasks in any order


async def test_a_failing_job_fails_alone_and_its_savepoint_undoes_it() -> None:
    def half_then_fail(conn: Conn) -> None:
        conn.rows.append("half")
        raise ValueError("no")

    async with engine() as writer:
        holder = Holder()
        failures: list[StoreError] = []

        async def failing() -> None:
            try:
                await writer.write(half_then_fail)
            except StoreError as exc:
                failures.append(exc)

        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.write, holder)
                await holder.started()
                nursery.start_soon(writer.write, put("before"))
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(failing)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(writer.write, put("after"))
                await trio.testing.wait_all_tasks_blocked()
                holder.release.set()
        assert [f.message for f in failures] == ["translated: no"]  # the backend's translation
        assert backend(writer).committed == ["before", "after"]
        assert writer.statistics().batches == 2


async def test_a_job_that_loses_the_transaction_fails_the_whole_batch() -> None:
    def lose(conn: Conn) -> None:
        conn.in_transaction = False
        raise ValueError("gone")

    commits = Commits()
    async with engine() as writer:
        writer.listener = commits
        holder = Holder()
        errors: list[str] = []

        async def write(fn: Callable[[Conn], Any]) -> None:
            try:
                await writer.write(fn)
            except StoreError as exc:
                errors.append(exc.message)

        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.write, holder)
                await holder.started()
                writer.append(event("s", 1))
                nursery.start_soon(write, put("lost with it"))
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(write, lose)
                await trio.testing.wait_all_tasks_blocked()
                holder.release.set()
        expected = "commit to the fake database failed: transaction rolled back: gone"
        assert errors == [expected, expected]
        assert backend(writer).committed == []
        assert commits.calls == [({}, {"s": "transaction rolled back: gone"})]
        assert await writer.write(put("next")) == "next"  # the writer carries on


async def test_a_bug_fails_its_batch_loudly_and_the_writer_keeps_serving() -> None:
    def bug(conn: Conn) -> None:
        raise Bug  # not an Exception: nothing on the way catches it

    async with engine() as writer:
        with trio.fail_after(slow(30)):
            with pytest.raises(StoreError, match="writing the fake database failed"):
                await writer.write(bug)
            assert await writer.write(put(1)) == 1


async def test_a_cancelled_caller_stops_waiting_and_its_write_commits_all_the_same() -> None:
    async with engine() as writer:
        holder = Holder()
        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.write, holder)
                await holder.started()
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await writer.write(put("given up on"))
                assert scope.cancelled_caught
                assert writer.statistics().jobs_waiting == 2  # its slot is still taken
                holder.release.set()
            assert await writer.write(put("next")) == "next"
        assert backend(writer).committed == ["given up on", "next"]
        assert writer.statistics().jobs_waiting == 0  # delivered: the slot is free again


async def test_backpressure_and_closing_while_producers_wait() -> None:
    async with engine(queue_size=2) as writer:
        holder = Holder()
        done: list[int] = []
        refused: list[str] = []

        async def write(n: int) -> None:
            try:
                done.append(await writer.write(put(n)))
            except StoreError as exc:
                refused.append(exc.message)

        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.write, holder)
                await holder.started()
                for n in range(4):
                    nursery.start_soon(write, n)
                await trio.testing.wait_all_tasks_blocked()
                stats = writer.statistics()
                assert (stats.jobs_waiting, stats.tasks_waiting, stats.queue_size) == (2, 3, 2)
                writer.shutdown()
                with pytest.raises(StoreError, match="closed"):
                    await writer.write(put("late"))
                holder.release.set()
        assert len(done) == 1  # the one queued before the close: committed
        assert refused == ["the fake store is closed"] * 3  # refused once room came free
    assert backend(writer).committed == done
    assert backend(writer).closed


async def test_posted_jobs_take_no_slot_and_a_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def failing(conn: Conn) -> None:
        raise ValueError("posted")

    async with engine(queue_size=1) as writer:
        with caplog.at_level(logging.WARNING, "greenroom.persistence._group_commit"):
            writer.post(put("posted"))
            writer.post(failing)
            with trio.fail_after(slow(30)):
                assert await writer.write(put("awaited")) == "awaited"  # after the posted ones
        assert backend(writer).committed == ["posted", "awaited"]
        assert "translated: posted" in caplog.text
    writer.post(put("after the close"))  # nothing, and no error
    assert backend(writer).committed == ["posted", "awaited"]


async def test_the_listener_hears_of_events_before_the_caller_resumes() -> None:
    heard: list[tuple[dict[str, int], dict[str, str]]] = []
    async with engine() as writer:
        writer.listener = lambda heads, failed: heard.append((dict(heads), dict(failed)))
        holder = Holder()
        seen_on_resuming: list[Any] = []

        async def write_after_the_events() -> None:
            await writer.write(put("after the events"))
            seen_on_resuming.extend(heard)

        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.write, holder)
                await holder.started()
                writer.append(event("s", 1))
                writer.append(event("fenced", 1))
                writer.append(event("s", 2))
                nursery.start_soon(write_after_the_events)
                await trio.testing.wait_all_tasks_blocked()
                holder.release.set()
        # Resumed: the events queued before its job were committed and reported first.
        assert seen_on_resuming == [({"s": 2}, {"fenced": "fenced"})]
        committed = backend(writer).committed
        assert committed == [("event", "s", 1), ("event", "s", 2), "after the events"]
        assert await writer.write(lambda conn: writer.take_touched()) == {"s"}
        assert await writer.write(lambda conn: writer.take_touched()) == set()


async def test_a_failing_listener_is_logged_and_the_callers_still_resume(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        raise RuntimeError("listener bug")

    async with engine() as writer:
        writer.listener = broken
        writer.append(event("s", 1))
        with trio.fail_after(slow(30)):
            assert await writer.write(put("x")) == "x"
        assert "the commit listener of the fake database failed" in caplog.text


async def test_events_alone_are_committed_in_one_batch_with_nobody_waiting() -> None:
    commits = Commits()
    heard = trio.Event()

    def listener(heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        commits(heads, failed)
        heard.set()

    async with engine() as writer:
        writer.listener = listener
        for seq in range(1, 4):
            writer.append(event("s", seq))  # queued at once: the thread lingers for more
        with trio.fail_after(slow(10)):
            await heard.wait()
        assert commits.calls == [({"s": 3}, {})]
        assert writer.statistics().batches == 1


async def test_a_closed_writer_refuses_writes_and_reports_appended_events() -> None:
    commits = Commits()
    async with engine() as writer:
        writer.listener = commits
    assert writer.closed
    with pytest.raises(StoreError, match="the fake store is closed"):
        await writer.write(put(1))
    writer.append(event("s", 1))
    assert commits.calls == [({}, {"s": "the fake store is closed"})]
    assert backend(writer).closed


# --- the same engine in both SQL stores -----------------------------------------------------

SqlStore = SqliteStore | PostgresStore


def open_sql(kind: str, path: Path) -> AbstractAsyncContextManager[Any]:
    return postgres_store() if kind == "postgres" else open_sqlite_store(path)


@pytest.fixture(params=["sqlite", "postgres"])
async def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlStore]:
    async with open_sql(request.param, tmp_path / "store.db") as opened:
        yield opened


async def test_a_stores_writes_share_one_transaction_and_a_cancelled_one_commits(
    sql_store: SqlStore,
) -> None:
    session = await sql_store.add_session(Session.new())
    holder = Holder()
    ids: dict[int, int] = {}

    async def add(n: int) -> None:
        ids[n] = await sql_store.add_message(session.id, Message.user(f"m{n}"))

    failures: list[Exception] = []

    async def missing() -> None:
        try:
            await sql_store.group_commit.write(lambda conn: _missing(), atomic=True)
        except SessionNotFound as exc:
            failures.append(exc)

    before = sql_store.batches
    with trio.fail_after(slow(30)):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sql_store.group_commit.write, holder)
            await holder.started()
            for n in range(5):
                nursery.start_soon(add, n)
            with trio.CancelScope() as scope:
                scope.cancel()
                await sql_store.add_message(session.id, Message.user("given up on"))
            nursery.start_soon(missing)
            await trio.testing.wait_all_tasks_blocked()
            holder.release.set()
    assert sql_store.batches - before == 2  # the holder, then all the others together
    assert [type(f).__name__ for f in failures] == ["SessionNotFound"]  # it failed alone
    stored = await sql_store.get_session(session.id)
    contents = [m.content for m in stored.items if isinstance(m, Message)]
    assert sorted(contents) == sorted([*(f"m{n}" for n in range(5)), "given up on"])
    assert sql_store.group_commit.statistics().jobs_waiting == 0


def _missing() -> None:
    raise SessionNotFound("missing")


async def test_closing_a_store_commits_what_was_queued_first(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with open_sqlite_store(path) as store:
        session = await store.add_session(Session.new())
        holder = Holder()
        done: list[int] = []

        async def add(n: int) -> None:
            done.append(await store.add_message(session.id, Message.user(f"m{n}")))

        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.group_commit.write, holder)
                await holder.started()
                for n in range(3):
                    nursery.start_soon(add, n)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(store.aclose)
                await trio.testing.wait_all_tasks_blocked()
                holder.release.set()
        assert len(done) == 3
    async with open_sqlite_store(path) as store:
        assert len((await store.get_session(session.id)).items) == 3
