"""``greenroom export`` and ``greenroom import jsonl``: one session per line, read back into
another store (SQLite and PostgreSQL) as the same sessions; a second import adds nothing; a bad
line is named by file and line, the good ones still go in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from greenroom.domain import Message, Session, SubSession
from greenroom.persistence import Store, open_sqlite_store
from tests import pg
from tests.transfer.docker_agent_db import create, populate
from tests.transfer.test_import_docker_agent import read_tree, run_cli


def without_message_ids(session: Session) -> Session:
    """``session`` as another store holds it: message ids are each store's own."""
    items = []
    for item in session.items:
        if isinstance(item, Message):
            item = attrs.evolve(item, id=0)
        elif isinstance(item, SubSession):
            item = SubSession(without_message_ids(item.session))
        items.append(item)
    return attrs.evolve(session, items=tuple(items))


async def comparable(store: Store) -> dict[str, Session]:
    return {s.id: without_message_ids(s) for s in await read_tree(store)}


async def filled_store(tmp_path: Path) -> Path:
    """A greenroom SQLite store holding the docker-agent test sessions."""
    source = tmp_path / "session.db"
    conn = create(source)
    populate(conn)
    conn.execute("DELETE FROM sessions WHERE id = 's-bad'")
    conn.close()
    store_path = tmp_path / "a.sqlite3"
    assert await run_cli("import", "docker-agent", str(source), "--db", str(store_path)) == 0
    async with open_sqlite_store(store_path) as db:  # greenroom-only fields travel too
        await db.update_session(
            attrs.evolve(await db.get_session("s-gamma"), safety_policy="balanced")
        )
    return store_path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


async def test_round_trip_into_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_a = await filled_store(tmp_path)
    out = tmp_path / "sessions.jsonl"
    argv = ("export", "--db", str(store_a), "--out", str(out), "--progress-every", "2")
    assert await run_cli(*argv) == 0
    err = capsys.readouterr().err
    assert "greenroom export: 2 of 3 sessions written" in err and "3 sessions written" in err
    exported = lines(out)
    assert [(e["format"], e["version"]) for e in exported] == [("greenroom.session", 1)] * 3
    by_id = {e["session"]["id"]: e["session"] for e in exported}
    assert by_id["s-alpha"]["messages"][4]["sub_session"]["id"] == "s-alpha-sub"
    assert by_id["s-gamma"]["safety_policy"] == "balanced"

    store_b = tmp_path / "b.sqlite3"
    assert await run_cli("import", "jsonl", str(out), "--db", str(store_b)) == 0
    assert "3 sessions read: 3 imported" in capsys.readouterr().err
    assert await run_cli("import", "jsonl", str(out), "--db", str(store_b)) == 0
    assert "3 sessions read: 0 imported, 3 already present" in capsys.readouterr().err
    async with open_sqlite_store(store_a) as a:
        original = await comparable(a)
    async with open_sqlite_store(store_b) as b:
        assert await comparable(b) == original
        assert (await b.get_session("s-gamma")).safety_policy == "balanced"


async def test_round_trip_into_postgres(tmp_path: Path) -> None:
    store_a = await filled_store(tmp_path)
    out = tmp_path / "sessions.jsonl"
    assert await run_cli("export", "--db", str(store_a), "--out", str(out)) == 0
    async with open_sqlite_store(store_a) as a:
        original = await comparable(a)
    async with pg.database() as dsn:
        assert await run_cli("import", "jsonl", str(out), "--db", dsn) == 0
        assert await run_cli("import", "jsonl", str(out), "--db", dsn) == 0
        async with pg.node(dsn) as node:
            assert await comparable(node) == original
        # and back out of PostgreSQL: the same lines, but for the order of a store's own
        again = tmp_path / "again.jsonl"
        assert await run_cli("export", "--db", dsn, "--out", str(again)) == 0
    strip = [without_ids_json(e) for e in lines(again)]
    assert sorted(strip, key=str) == sorted((without_ids_json(e) for e in lines(out)), key=str)


def without_ids_json(value: Any) -> Any:
    """JSON without the ``id`` of message items (each store numbers its own)."""
    if isinstance(value, list):
        return [without_ids_json(v) for v in value]
    if isinstance(value, dict):
        out = {k: without_ids_json(v) for k, v in value.items()}
        if "message" in out and isinstance(out["message"], dict):
            out["message"].pop("id", None)
        return out
    return value


async def test_chosen_sessions_and_missing_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_a = await filled_store(tmp_path)
    out = tmp_path / "one.jsonl"
    argv = ("export", "--db", str(store_a), "--out", str(out), "--session", "s-beta")
    assert await run_cli(*argv, "--session", "nope") == 1
    assert "greenroom: session not found: nope" in capsys.readouterr().err
    assert [e["session"]["id"] for e in lines(out)] == ["s-beta"]


async def test_bad_lines_are_named_and_the_rest_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_a = await filled_store(tmp_path)
    out = tmp_path / "sessions.jsonl"
    assert await run_cli("export", "--db", str(store_a), "--out", str(out)) == 0
    good = out.read_bytes().splitlines()
    role = json.loads(good[0])
    role["session"]["id"] = "s-role"
    role["session"]["messages"][0]["message"]["message"]["role"] = "wizard"
    newer = {"format": "greenroom.session", "version": 2, "session": {}}
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(
        b"\n".join(
            [
                good[0],
                b"{not json",
                json.dumps(role).encode(),
                b"",
                json.dumps(newer).encode(),
                good[1],
            ]
        )
        + b"\n"
    )
    store_b = tmp_path / "b.sqlite3"
    assert await run_cli("import", "jsonl", str(mixed), "--db", str(store_b)) == 1
    err = capsys.readouterr().err
    assert f"greenroom: {mixed}:2: not JSON" in err
    assert (
        f"greenroom: {mixed}:3: $.session.messages[0].message.message.role: expected one of" in err
    )
    assert f"greenroom: {mixed}:5: export version 2: this greenroom reads version 1" in err
    assert "5 sessions read: 2 imported, 0 already present (skipped), 3 failed" in err
    async with open_sqlite_store(store_b) as b:
        assert await b.count_sessions() == 2


async def test_import_from_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store_a = await filled_store(tmp_path)
    out = tmp_path / "sessions.jsonl"
    assert await run_cli("export", "--db", str(store_a), "--out", str(out)) == 0

    class Stdin:
        buffer = out.open("rb")

    monkeypatch.setattr("sys.stdin", Stdin)
    try:
        assert await run_cli("import", "jsonl", "-", "--db", str(tmp_path / "b.sqlite3")) == 0
    finally:
        await trio.to_thread.run_sync(Stdin.buffer.close)
    async with open_sqlite_store(tmp_path / "b.sqlite3") as b:
        assert await b.count_sessions() == 3
