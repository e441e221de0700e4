"""What only the PostgreSQL store does: migrations by several nodes at once, ownership across
nodes (claims, takeovers, incarnations, the fence in both interleavings), membership on the
database clock, the commit bus, lost connections and tombstones.

Real PostgreSQL (tests/pg.py: a fresh database per test), real clock; every wait is bounded.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import psycopg
import pytest
import trio

from greenroom.domain import Message, Session, Warning
from greenroom.errors import (
    DatabaseError,
    DatabaseUnavailable,
    NewerDatabase,
    NodeFenced,
    OwnedElsewhere,
    SessionNotFound,
    StoreError,
)
from greenroom.persistence import Lease
from greenroom.persistence._pg_fence import notify, parse_notify
from greenroom.persistence._pg_open import migrations as pg_migrations
from greenroom.persistence.postgres import PostgresStore, open_postgres_store
from tests.slowness import slow

from .pg import database, node, run_sql
from .test_event_store_contract import Commits, append, new_session, row


def listen(store: PostgresStore) -> Commits:
    commits = Commits()
    store.writer.listen(commits)
    return commits


async def expire(dsn: str, node_id: str) -> None:
    """End ``node_id``'s lease now, as the database clock sees it (no waiting for a ttl)."""
    await run_sql(
        dsn, "UPDATE gr_nodes SET lease_until = now() - interval '1 s' WHERE node_id = %s", node_id
    )


async def backends(dsn: str, role: str, node_id: str) -> list[int]:
    rows = await run_sql(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database()",  # other tests may use other databases
        f"greenroom {role} {node_id}",
    )
    return [r[0] for r in rows]


async def kill(dsn: str, role: str, node_id: str) -> int:
    pids = await backends(dsn, role, node_id)
    for pid in pids:
        await run_sql(dsn, "SELECT pg_terminate_backend(%s)", pid)
    return len(pids)


# --- opening -------------------------------------------------------------------------------


async def test_three_nodes_migrate_one_database_at_once() -> None:
    async with database() as dsn:
        opened: list[int] = []

        async def start(n: int) -> None:
            async with node(dsn, f"n{n}") as store:
                opened.append(store.incarnation)

        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(start, n)
        assert opened == [1, 1, 1]
        versions = await run_sql(dsn, "SELECT version FROM gr_schema_migrations ORDER BY 1")
        assert versions == [(v,) for v, _, _ in pg_migrations()]  # each applied once


async def test_a_newer_schema_is_refused() -> None:
    async with database() as dsn:
        async with node(dsn, join=False):
            pass
        await run_sql(dsn, "INSERT INTO gr_schema_migrations VALUES (99, 'future', now())")
        with pytest.raises(NewerDatabase, match="schema 99"):
            async with node(dsn, join=False):
                pass


async def test_an_unreachable_server_names_it_and_hides_the_password() -> None:
    dsn = "postgresql://ada:s3cret@127.0.0.1:1/nowhere"  # port 1: nothing listens
    with pytest.raises(DatabaseError) as caught:
        async with open_postgres_store(dsn, node_id="n1", advertise_url=""):
            pass
    message = str(caught.value)
    assert '"nowhere" on 127.0.0.1:1' in message and "check that the server runs" in message
    assert "s3cret" not in message
    async with database() as dsn:
        missing = dsn.rsplit("/", 1)[0] + "/gr_t_missing"
        with pytest.raises(DatabaseError, match=r'"gr_t_missing".*does not exist'):
            async with open_postgres_store(missing, node_id="n1", advertise_url=""):
                pass


# --- ownership across nodes ---------------------------------------------------------------


async def test_a_live_owner_keeps_its_session_and_a_dead_one_loses_it() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        commits = listen(one)
        sid = await new_session(one)
        lease = await one.ownership.claim(sid)
        assert lease == Lease(sid, 1, 0, "idle")
        assert await one.ownership.claim(sid) == lease  # its own: kept at the same epoch
        with pytest.raises(OwnedElsewhere) as caught:
            await two.ownership.claim(sid)
        assert (caught.value.owner, caught.value.owner_url) == ("n1", "http://n1.test")
        owner = await two.membership.owner_of(sid)
        assert owner is not None and (owner.node_id, owner.sessions) == ("n1", (sid,))

        await append(one, commits, lease, Warning("one"), Warning("two"))
        await expire(dsn, "n1")
        assert await two.membership.owner_of(sid) is None
        assert await one.membership.renew() is False  # expired: this incarnation is over
        taken = await two.ownership.claim(sid)
        assert (taken.epoch, taken.last_seq) == (2, 2)
        with pytest.raises(NodeFenced):  # n1 without a lease claims nothing
            await one.ownership.claim(sid)
        # n1's late writes are fenced, awaited or not.
        one.writer.append_event(row(lease, 3, Warning("zombie")))
        await commits.until(sid, failed=True)
        with pytest.raises(NodeFenced):
            await one.writer.begin_tool_call(lease, intent(sid))
        assert [r[0] for r in await run_sql(dsn, "SELECT epoch FROM gr_events")] == [1, 1]


async def test_plain_store_writes_of_a_node_that_lost_the_session_are_refused() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        sid = await new_session(one)
        await one.update_title(sid, "unowned: anyone may write")
        await one.ownership.claim(sid)
        await one.add_message(sid, Message.user("by the owner"))
        await expire(dsn, "n1")
        await two.ownership.claim(sid)  # a takeover while n1 was paused
        late = [
            one.add_message(sid, Message.user("late")),
            one.update_title(sid, "late"),
            one.set_starred(sid, True),
            one.delete_session(sid),
        ]
        for write in late:
            with pytest.raises(NodeFenced):
                await write
        stored = await two.get_session(sid)
        assert (stored.title, stored.starred, len(stored.items)) == (
            "unowned: anyone may write",
            False,
            1,
        )
        await two.update_title(sid, "by the new owner")
        assert (await one.get_session(sid)).title == "by the new owner"


def intent(sid: str) -> Any:
    from greenroom.persistence import ToolCallIntent

    return ToolCallIntent(sid, "c1", "t", "tool", "{}", 1, Session.new().created_at)


async def test_three_nodes_claiming_one_session_at_once_get_one_owner() -> None:
    async with (
        database() as dsn,
        node(dsn, "n1") as one,
        node(dsn, "n2") as two,
        node(dsn, "n3") as three,
    ):
        sid = await new_session(one)
        won: list[Lease] = []
        lost: list[str] = []

        async def claim(store: PostgresStore) -> None:
            try:
                won.append(await store.ownership.claim(sid))
            except OwnedElsewhere as exc:
                lost.append(exc.owner)

        async with trio.open_nursery() as nursery:
            for store in (one, two, three):
                nursery.start_soon(claim, store)
        assert [lease.epoch for lease in won] == [1]
        owner = await one.membership.owner_of(sid)
        assert owner is not None and lost == [owner.node_id] * 2


async def test_connections_carry_the_timeouts_bounded_by_the_lease() -> None:
    names = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")

    def show(conn: Any) -> list[Any]:
        return [conn.execute(f"SHOW {name}").fetchone()[0] for name in names]

    async with database() as dsn, node(dsn, "n1", lease_ttl=60) as one:
        assert await one.run_read(show) == ["30s", "10s", "5s"]
        # A short lease: no transaction of this node outlives it (a takeover would wait).
        async with node(dsn, "n2", lease_ttl=3) as two:
            assert await two.run_read(show) == ["3s", "10s", "3s"]
            assert await two.group_commit.write(show) == ["3s", "10s", "3s"]
        await one.membership.ping()


async def test_join_bumps_the_incarnation_and_frees_the_old_ones_sessions_at_once() -> None:
    async with database() as dsn, node(dsn, "n1") as old:
        sid = await new_session(old)
        lease = await old.ownership.claim(sid)
        async with node(dsn, "n1") as restarted:  # the same node id, restarted
            assert (old.incarnation, restarted.incarnation) == (1, 2)
            assert await old.membership.renew() is False
            again = await restarted.ownership.claim(sid)  # no waiting for a ttl
            assert again.epoch == lease.epoch + 1
            with pytest.raises(NodeFenced):
                await old.ownership.claim(sid)
            (info,) = await restarted.membership.nodes()
            assert (info.incarnation, info.sessions, info.alive) == (2, (sid,), True)
            assert 9.0 < info.lease_remaining <= 10.0


async def test_renew_extends_a_live_lease_only() -> None:
    async with database() as dsn, node(dsn, "n1", lease_ttl=30.0) as one:
        await run_sql(dsn, "UPDATE gr_nodes SET lease_until = now() + interval '1 s'")
        assert await one.membership.renew() is True
        (info,) = await one.membership.nodes()
        assert info.lease_remaining > 29.0
        await expire(dsn, "n1")
        assert await one.membership.renew() is False
        (info,) = await one.membership.nodes()
        assert info.lease_remaining < 0 and not info.alive
        assert await one.membership.join() == 2  # rejoining is the way back
        assert await one.membership.renew() is True


async def test_a_short_lease_runs_out_on_the_database_clock() -> None:
    async with database() as dsn, node(dsn, "n1", lease_ttl=0.5) as one, node(dsn, "n2") as two:
        sid = await new_session(one)
        await one.ownership.claim(sid)
        with pytest.raises(OwnedElsewhere):
            await two.ownership.claim(sid)
        with trio.fail_after(slow(5)):
            while True:
                try:
                    await two.ownership.claim(sid)
                    break
                except OwnedElsewhere:
                    await trio.sleep(0.1)  # real time: the lease runs out on the server's clock


async def test_sweep_finds_running_sessions_of_dead_owners() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        from greenroom.persistence import TurnStart

        busy, idle = await new_session(one), await new_session(one)
        lease = await one.ownership.claim(busy)
        await one.ownership.claim(idle)
        start = TurnStart("t1", busy, 1, Session.new().created_at)
        await one.writer.begin_turn(lease, start, ())
        assert await two.membership.sweep() == []  # n1 is alive
        assert await two.events.interrupted_sessions() == []  # n1's own business
        await expire(dsn, "n1")
        assert await two.membership.sweep() == [busy]
        assert await two.events.interrupted_sessions() == [busy]
        assert (await two.ownership.claim(busy)).state == "running"  # recovery's job now
        assert await two.membership.sweep() == []


async def test_leave_releases_every_session() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        sid = await new_session(one)
        await one.ownership.claim(sid)
        await one.membership.leave()
        assert one.incarnation == 0
        with pytest.raises(NodeFenced):
            await one.ownership.claim(sid)
        assert (await two.ownership.claim(sid)).epoch == 2


async def test_release_lease_frees_the_session_for_another_node() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        sid = await new_session(one)
        lease = await one.ownership.claim(sid)
        one.ownership.release_lease(lease)
        await one.store.update_title(sid, "after the release")  # the writer keeps order
        assert (await two.ownership.claim(sid)).epoch == 2


# --- the fence in both interleavings --------------------------------------------------------


async def test_an_owner_batch_committing_first_is_seen_by_the_takeover() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        commits = listen(one)
        sid = await new_session(one)
        lease = await one.ownership.claim(sid)
        await expire(dsn, "n1")  # n2 may take over; n1's writer does not know yet

        def hold(conn: psycopg.Connection[Any]) -> None:
            # In n1's batch, after its events' fence: the head row stays locked a while.
            conn.execute("SELECT pg_sleep(0.5)")

        for r in [row(lease, 1, Warning("a")), row(lease, 2, Warning("b"))]:
            one.writer.append_event(r)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one.group_commit.write, hold)
            await wait_for_lock_wait(dsn, "n1", present=False)
            started = time.monotonic()
            taken = await two.ownership.claim(sid)  # waits for n1's commit
        assert time.monotonic() - started > 0.2
        assert (taken.epoch, taken.last_seq) == (2, 2)
        assert commits.heads == {sid: 2} and commits.failed == {}


async def wait_for_lock_wait(dsn: str, node_id: str, *, present: bool = True) -> None:
    """Until node_id's writer waits on a lock (present), or runs its pg_sleep (not present)."""
    with trio.fail_after(slow(10)):
        while True:
            rows = await run_sql(
                dsn,
                "SELECT wait_event_type, state, query FROM pg_stat_activity"
                " WHERE application_name = %s AND datname = current_database()",
                f"greenroom writer {node_id}",
            )
            if present and rows and rows[0][0] == "Lock":
                return
            if not present and rows and rows[0][1] == "active" and "pg_sleep" in rows[0][2]:
                return
            await trio.sleep(0.01)  # real time: polling another backend's state


async def test_a_takeover_committing_first_fences_the_owner_batch() -> None:
    async with database() as dsn, node(dsn, "n1") as one:
        commits = listen(one)
        sid = await new_session(one)
        lease = await one.ownership.claim(sid)
        takeover: psycopg.Connection[Any] = await trio.to_thread.run_sync(
            lambda: psycopg.connect(dsn)
        )
        with takeover:  # another node's claim, its commit held back
            await trio.to_thread.run_sync(
                lambda: takeover.execute(
                    "UPDATE gr_heads SET epoch = epoch + 1, owner_node = 'n2', owner_inc = 1"
                    " WHERE session_id = %s",
                    (sid,),
                )
            )
            one.writer.append_event(row(lease, 1, Warning("too late")))
            await wait_for_lock_wait(dsn, "n1")  # n1's fence waits on the takeover's row lock
            await trio.to_thread.run_sync(takeover.commit)
        await commits.until(sid, failed=True)
        assert "fenced" in commits.failed[sid]
        assert await run_sql(dsn, "SELECT epoch, seq FROM gr_events") == []
        assert await one.events.last_seq(sid) == 0


# --- the commit bus ------------------------------------------------------------------------


async def next_update(store: PostgresStore) -> tuple[str, int]:
    with trio.fail_after(slow(10)):
        return await store.bus.updates().__anext__()


async def test_other_nodes_commits_reach_the_bus_and_own_ones_do_not() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        await one.bus.listening()
        await two.bus.listening()
        c1, c2 = listen(one), listen(two)
        mine = await new_session(one)
        await append(one, c1, await one.ownership.claim(mine), Warning("a"), Warning("b"))
        assert await next_update(two) == (mine, 2)
        theirs = await new_session(two)
        await append(two, c2, await two.ownership.claim(theirs), Warning("c"))
        assert await next_update(one) == (theirs, 1)  # not its own commit before it


async def test_the_bus_reconnects_after_its_connection_is_killed() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        await two.bus.listening()
        assert await kill(dsn, "listen", "n2") == 1
        with trio.fail_after(slow(10)):
            while True:
                if two.bus.connects == 2:
                    break
                await trio.sleep(0.02)  # real time: the listener thread backs off, reconnects
        commits = listen(one)
        sid = await new_session(one)
        await append(one, commits, await one.ownership.claim(sid), Warning("after"))
        assert await next_update(two) == (sid, 1)


def test_notify_payloads_stay_under_8000_bytes_and_parse_back() -> None:
    sent: list[str] = []

    class Conn:
        def execute(self, query: str, params: tuple[str]) -> None:
            sent.append(params[0])

    heads = {f"session-{n:04d}-" + "x" * 30: n for n in range(1000)}
    notify(Conn(), "node-a", heads)  # type: ignore[arg-type]
    assert len(sent) > 1 and all(len(p.encode()) < 8000 for p in sent)
    found: dict[str, int] = {}
    for payload in sent:
        origin, pairs = parse_notify(payload)
        assert origin == "node-a"
        found.update(pairs)
    assert found == heads


# --- lost connections and tombstones -------------------------------------------------------


async def test_a_killed_connection_fails_its_request_with_database_unavailable() -> None:
    async with database() as dsn, node(dsn, "n1") as one:
        sid = await new_session(one)
        assert await kill(dsn, "writer", "n1") == 1
        with pytest.raises(DatabaseUnavailable):
            await one.store.update_title(sid, "lost")
        await one.store.update_title(sid, "kept")  # the writer reconnected
        assert await kill(dsn, "read", "n1") >= 1
        failures = 0
        for _ in range(5):  # each killed pooled connection fails one read, then is replaced
            try:
                assert (await one.store.get_session(sid)).title == "kept"
            except DatabaseUnavailable:
                failures += 1
        assert 1 <= failures <= 4
        await one.membership.ping()  # the pool has healthy connections again


async def test_a_deleted_session_is_a_tombstone_for_good() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        commits = listen(one)
        sid = await new_session(one)
        lease = await one.ownership.claim(sid)
        await append(one, commits, lease, Warning("a"))
        await one.store.delete_session(sid)
        for store in (one, two):
            with pytest.raises(SessionNotFound):
                await store.store.get_session(sid)
            with pytest.raises(SessionNotFound):
                await store.ownership.claim(sid)
        with pytest.raises(StoreError, match="already exists"):
            await two.store.add_session(attrs.evolve(Session.new(), id=sid))
        with pytest.raises(SessionNotFound):
            await two.store.update_session(attrs.evolve(Session.new(), id=sid))
        ((deleted, epoch, owner),) = await run_sql(
            dsn,
            "SELECT s.deleted_at IS NOT NULL, h.epoch, h.owner_node FROM gr_sessions s"
            " JOIN gr_heads h USING (session_id) WHERE session_id = %s",
            sid,
        )
        assert (deleted, epoch, owner) == (True, lease.epoch + 1, None)
        assert await one.store.list_sessions() == []


# --- the actors on PostgreSQL ----------------------------------------------------------------


async def test_a_turn_run_by_an_actor_is_in_the_log_for_every_node() -> None:
    from greenroom.actors import open_registry
    from greenroom.domain import AgentChoice

    from .fakes import STARTED, STOPPED, FakeFactory, FakeRuntime, drain, user

    runtime = FakeRuntime(script=[STARTED, AgentChoice("hel"), AgentChoice("lo"), STOPPED])
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        await two.bus.listening()
        with trio.fail_after(slow(30)):
            async with open_registry(one, FakeFactory(runtime)) as registry:
                sid = (await registry.create(Session.new(title="pg"))).id
                await drain(await registry.session(sid).run("agent", (user("hi"),)))
                last = await one.events.last_seq(sid)
                assert last >= 4
                seen = 0
                while seen < last:  # n2 hears of every commit (one NOTIFY per batch)
                    update = await next_update(two)
                    assert update[0] == sid
                    seen = update[1]
                with pytest.raises(OwnedElsewhere):  # n1's actor holds the session
                    await two.ownership.claim(sid)
        stored = await two.events.read_events(sid, 0, 100)
        assert [e.seq for e in stored] == list(range(1, last + 1))
        assert b'"hel"' in b"".join(e.body for e in stored)
        history = (await two.store.get_session(sid)).items
        assert [m.role for m in history if isinstance(m, Message)] == ["user"]
