"""``greenroom import docker-agent``: a real docker-agent-shaped SQLite file into greenroom's
SQLite and PostgreSQL stores, checked through the store and the HTTP API; a second import adds
nothing; what is not a docker-agent database is refused with exit status 2 before the store
is touched."""

from __future__ import annotations

import datetime as dt
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from greenroom.cli import main
from greenroom.domain import Message, Session, SubSession, Summary
from greenroom.persistence import Store, open_sqlite_store
from greenroom.testing import open_greenroom
from greenroom.transfer._cli import PAGE
from tests import pg
from tests.transfer import docker_agent_db as da


def docker_agent_file(tmp_path: Path, **options: int) -> Path:
    path = tmp_path / "session.db"
    conn = da.create(path, **options)
    da.populate(conn)
    conn.close()
    return path


async def run_cli(*argv: str) -> int:
    """The command line, as a user runs it (its own trio.run, on a worker thread)."""
    return await trio.to_thread.run_sync(main, list(argv))


async def read_tree(store: Store) -> list[Session]:
    return [await store.get_session(s.id) for s in await store.list_sessions()]


def check_alpha(alpha: Session) -> None:
    assert alpha.title == "Paris trip"
    assert alpha.created_at == dt.datetime(2026, 1, 10, 8, 0, tzinfo=dt.UTC)
    assert alpha.starred and alpha.tools_approved and alpha.thinking
    assert (alpha.input_tokens, alpha.output_tokens, alpha.cost) == (1200, 340, 0.0125)
    assert alpha.working_dir == "/home/me/trip" and alpha.max_iterations == 20
    assert alpha.permissions is not None
    assert (alpha.permissions.allow, alpha.permissions.deny) == (("read_*",), ("shell",))
    assert dict(alpha.agent_model_overrides) == {"root": "openai/gpt-4o"}
    assert alpha.custom_models_used == ("openai/gpt-4o",)
    kinds = [type(item).__name__ for item in alpha.items]
    # the reference to a deleted sub-session is left out, as docker-agent leaves it out
    assert kinds == ["Message", "Message", "Message", "Summary", "SubSession", "Message"]
    user, call, result, summary, sub, last = alpha.items
    assert isinstance(user, Message) and user.content == "Plan Paris"
    assert user.message.created_at == dt.datetime(2026, 1, 10, 8, 0, 1, tzinfo=dt.UTC)
    assert isinstance(call, Message) and call.agent_name == "root"
    (tool_call,) = call.message.tool_calls
    assert (tool_call.id, tool_call.function.name) == ("call_1", "get_weather")
    assert tool_call.function.arguments == '{"city":"Paris"}'
    assert call.message.reasoning_content == "Weather first."
    assert call.message.thinking_signature == "sig-1"
    assert call.message.usage is not None and call.message.usage.input_tokens == 1000
    assert (call.message.model, call.message.cost) == ("gpt-4o", 0.01)
    assert isinstance(result, Message) and result.message.tool_call_id == "call_1"
    assert result.message.role == "tool" and result.content == "12C, rain"
    assert isinstance(summary, Summary) and summary.first_kept_entry == 0
    assert isinstance(sub, SubSession) and sub.session.id == "s-alpha-sub"
    assert sub.session.title == "research" and sub.session.input_tokens == 7
    hidden, answer = sub.session.items
    assert isinstance(hidden, Message) and hidden.implicit
    assert isinstance(answer, Message) and answer.agent_name == "researcher"
    assert isinstance(last, Message) and last.content == "Take an umbrella."


def check_beta_and_gamma(beta: Session, gamma: Session) -> None:
    # the legacy messages column, Go's "true"/"false" booleans
    assert beta.starred and not beta.thinking
    assert [type(i).__name__ for i in beta.items] == ["Message", "SubSession", "Message", "Summary"]
    sub = beta.items[1]
    assert isinstance(sub, SubSession) and sub.session.id == "s-beta-sub"
    summary = beta.items[3]
    assert isinstance(summary, Summary) and summary.cost == 0.002
    (message,) = gamma.items
    assert isinstance(message, Message)
    parts = message.message.multi_content
    assert [p.type for p in parts] == ["text", "image_url", "text"]
    assert parts[1].image_url is not None and parts[1].image_url.detail == "auto"
    assert parts[2].text == "[attached file not imported: /home/me/report.pdf]"


async def test_into_sqlite_then_again_then_through_the_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = docker_agent_file(tmp_path)
    store_path = tmp_path / "greenroom.sqlite3"
    assert await run_cli("import", "docker-agent", str(source), "--db", str(store_path)) == 1
    err = capsys.readouterr().err
    # the one row docker-agent could not read either is named, with its column; the rest went in
    assert f"greenroom: {source}: sessions row 's-bad': $.created_at: not an RFC 3339" in err
    assert "4 sessions read: 3 imported, 0 already present (skipped), 1 failed" in err
    assert "not carried over: message field thought_signature (1)" in err
    assert "not carried over: message field tool_definitions (1)" in err
    assert "not carried over: file attachments (kept as a text note) (1)" in err
    assert "not carried over: message field cache_control (1)" in err
    assert "not carried over: sub-session references to deleted sessions (1)" in err

    async with open_sqlite_store(store_path) as db:
        first = await read_tree(db)
    assert await run_cli("import", "docker-agent", str(source), "--db", str(store_path)) == 1
    assert "4 sessions read: 0 imported, 3 already present (skipped), 1 failed" in (
        capsys.readouterr().err
    )

    async with open_greenroom(store="sqlite", db_path=store_path) as g:
        assert await read_tree(g.store) == first  # nothing twice, message ids unchanged
        listed = {s["id"]: s for s in await g.client.sessions()}
        assert set(listed) == {"s-alpha", "s-beta", "s-gamma"}  # sub-sessions are not roots
        assert listed["s-alpha"]["starred"] and not listed["s-gamma"]["starred"]
        body = await g.client.session("s-alpha")
        assert body["title"] == "Paris trip"
        assert body["permissions"] == {"allow": ["read_*"], "ask": [], "deny": ["shell"]}
        assert [(m["message"]["role"], m["message"].get("content")) for m in body["messages"]] == [
            ("user", "Plan Paris"),
            ("assistant", None),
            ("tool", "12C, rain"),
            ("user", "Find museums"),
            ("assistant", "The Louvre."),
            ("assistant", "Take an umbrella."),
        ]
        assert body["messages"][1]["message"]["tool_calls"][0]["function"]["name"] == (
            "get_weather"
        )
        assert (await g.client.snapshot("s-alpha"))["cost"] == 0.0125
        check_alpha(await g.store.get_session("s-alpha"))
        check_beta_and_gamma(
            await g.store.get_session("s-beta"), await g.store.get_session("s-gamma")
        )


async def test_into_postgres_while_a_node_serves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = docker_agent_file(tmp_path)
    async with pg.database() as dsn, pg.node(dsn) as node:
        # a running node holds no lock the import needs: new ids are plain inserts
        assert await run_cli("import", "docker-agent", str(source), "--db", dsn) == 1
        assert "3 imported, 0 already present" in capsys.readouterr().err
        check_alpha(await node.get_session("s-alpha"))
        check_beta_and_gamma(await node.get_session("s-beta"), await node.get_session("s-gamma"))
        first = await read_tree(node)
        assert await run_cli("import", "docker-agent", str(source), "--db", dsn) == 1
        assert "0 imported, 3 already present" in capsys.readouterr().err
        assert await read_tree(node) == first


async def test_a_store_a_server_holds_is_refused(tmp_path: Path) -> None:
    source = docker_agent_file(tmp_path)
    store_path = tmp_path / "greenroom.sqlite3"
    async with open_sqlite_store(store_path) as db:
        argv = [sys.executable, "-m", "greenroom.cli", "import", "docker-agent", str(source)]
        done = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [*argv, "--db", str(store_path)], capture_output=True, text=True, timeout=120
            )
        )
        assert done.returncode == 2
        assert "is in use by another greenroom process" in done.stderr
        assert await db.count_sessions() == 0


def not_sqlite(path: Path) -> str:
    path.write_text("hello\n" * 200)
    return "is not a readable SQLite database"


def other_sqlite(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    return "is not a docker-agent session database: it has no migrations or sessions table"


def newer(path: Path) -> str:
    conn = da.create(path)
    da.record_migration(conn, 20, "020_add_something_new")
    conn.close()
    return "docker-agent migration 20 ('020_add_something_new') is newer than this greenroom"


def older(path: Path) -> str:
    da.create(path, upto=13).close()
    return "older than migration 014, or damaged: it lacks parent_id, (table session_items)"


def missing(path: Path) -> str:
    return "no such file"


@pytest.mark.parametrize("make", [not_sqlite, other_sqlite, newer, older, missing])
async def test_what_is_not_a_docker_agent_database_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object
) -> None:
    source = tmp_path / "session.db"
    expected = make(source)  # type: ignore[operator]
    store_path = tmp_path / "greenroom.sqlite3"
    assert await run_cli("import", "docker-agent", str(source), "--db", str(store_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"greenroom: {source}") and expected in err
    assert err.count("\n") == 1
    assert not store_path.exists()  # refused before the store was opened


async def test_a_greenroom_database_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.sqlite3"
    async with open_sqlite_store(other):
        pass
    assert await run_cli("import", "docker-agent", str(other), "--db", str(tmp_path / "g")) == 2
    assert "is a greenroom database, not docker-agent's" in capsys.readouterr().err


async def test_a_newer_schema_can_be_read_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "session.db"
    conn = da.create(source)
    conn.execute("ALTER TABLE sessions ADD COLUMN colour TEXT")
    da.record_migration(conn, 20, "020_add_colour")
    da.add_session(conn, "s-new", title="new", colour="blue")
    da.add_message(conn, "s-new", {"role": "user", "content": "hi"})
    conn.close()
    store_path = tmp_path / "greenroom.sqlite3"
    argv = ("import", "docker-agent", str(source), "--db", str(store_path))
    assert await run_cli(*argv, "--allow-newer-schema", "--progress-every", "1") == 0
    err = capsys.readouterr().err
    assert "greenroom import: 1 sessions in" in err
    assert "1 sessions read: 1 imported" in err
    async with open_sqlite_store(store_path) as db:
        assert (await db.get_session("s-new")).title == "new"


async def test_many_sessions_come_in_pages_with_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "session.db"
    conn = da.create(source)
    count = 2 * PAGE + 7  # three pages, the last one short
    for n in range(count):
        da.add_session(conn, f"s-{n:04}", title=f"t{n}")
        da.add_message(conn, f"s-{n:04}", {"role": "user", "content": f"m{n}"})
    conn.close()
    store_path = tmp_path / "greenroom.sqlite3"
    argv = ("import", "docker-agent", str(source), "--db", str(store_path))
    assert await run_cli(*argv, "--progress-every", "40") == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"greenroom import: {count} sessions in {source}"
    assert [line.split(":")[1].strip() for line in err[1:]] == [
        "40 sessions read",
        "80 sessions read",
        f"{count} sessions read",
    ]
    assert err[-1].endswith(f"{count} imported, 0 already present (skipped), 0 failed")
    async with open_sqlite_store(store_path) as db:
        assert await db.count_sessions() == count
        (last,) = (await db.get_session(f"s-{count - 1:04}")).items
        assert isinstance(last, Message) and last.content == f"m{count - 1}"
