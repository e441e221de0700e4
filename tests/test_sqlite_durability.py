"""An acknowledged write survives SIGKILL of the process that made it.

A child process (tests/_store_child.py ``append``) adds messages from several concurrent
producers and prints each id once ``add_message`` has returned. The test reads some of those
acknowledgements, kills the child mid-stream with SIGKILL, and checks the file: intact, and
holding every acknowledged message. Real clock: the store works in threads.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from greenroom.domain import Message
from greenroom.persistence import open_sqlite_store
from tests.slowness import slow

CHILD = Path(__file__).with_name("_store_child.py")
PRODUCERS = 8
LIMIT_PER_PRODUCER = 5_000  # the child stops on its own after 40,000 messages
ACKS_BEFORE_KILL = 500


def parse_acks(lines: list[bytes]) -> tuple[str, dict[int, str]]:
    session_line, *rest = lines
    word, session_id = session_line.decode().split()
    assert word == "session"
    acks: dict[int, str] = {}
    for line in rest:
        message_id, content = line.decode().split()
        acks[int(message_id)] = content
    return session_id, acks


def integrity(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


@pytest.mark.slow
async def test_acknowledged_messages_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    command = [sys.executable, str(CHILD), "append", str(path), str(PRODUCERS)]
    command.append(str(LIMIT_PER_PRODUCER))
    output = b""
    with trio.fail_after(slow(60)):
        async with trio.open_nursery() as nursery:
            run = partial(trio.run_process, command, stdout=subprocess.PIPE, check=False)
            process: trio.Process = await nursery.start(run)
            assert process.stdout is not None
            async with process.stdout:
                # The session line plus ACKS_BEFORE_KILL acknowledgements; no sleep needed.
                while output.count(b"\n") < 1 + ACKS_BEFORE_KILL:
                    chunk = await process.stdout.receive_some()
                    assert chunk, f"the child stopped early: {output[-200:]!r}"
                    output += chunk
                process.send_signal(signal.SIGKILL)
                # Whatever it printed before dying was acknowledged too: read to the end.
                async for chunk in process.stdout:
                    output += chunk
        assert process.returncode == -signal.SIGKILL  # killed, not finished

    # A line cut short by the kill is not an acknowledgement.
    complete = output[: output.rfind(b"\n") + 1]
    session_id, acks = parse_acks(complete.splitlines())
    assert len(acks) >= ACKS_BEFORE_KILL
    assert len(acks) < PRODUCERS * LIMIT_PER_PRODUCER  # the kill landed mid-stream

    assert await trio.to_thread.run_sync(integrity, path) == ["ok"]
    async with open_sqlite_store(path) as store:
        items = (await store.get_session(session_id)).items
        stored = {m.id: m.content for m in items if isinstance(m, Message)}
        assert len(stored) == len(items)
        missing = {i: c for i, c in acks.items() if stored.get(i) != c}
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {list(missing)[:5]}"
        # Each producer's acknowledgements are a prefix of its sequence: p3-0, p3-1, ...
        for producer in range(PRODUCERS):
            numbers = sorted(
                int(c.split("-")[1]) for c in acks.values() if c.startswith(f"p{producer}-")
            )
            assert numbers == list(range(len(numbers)))
        # And the reopened store carries on.
        next_id = await store.add_message(session_id, Message.user("after the crash"))
        assert next_id > max(stored)
