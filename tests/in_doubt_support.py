"""A SQLite database holding a session with a tool call *in doubt*, for the clients' tests.

A real turn runs the ``deploy`` tool (its intent is committed before the tool starts); the
server then stops while the tool runs. An orderly stop cancels the turn, so the file is put back
as a crash leaves it: the turn ``running``, the call ``started``, no tool result. Then the
start-up recovery (``recover``) repairs it as ``greenroom serve`` does: the turn interrupted,
the call in doubt, the session waiting for a person's decision.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio

from greenroom.actors import recover
from greenroom.persistence import open_sqlite_store
from greenroom.testing import ScriptedAgent, Tool, ToolCallContext, open_greenroom

DEPLOY_ARGS = {"env": "prod", "version": "1.2.3"}


def deploy_agent(inside: trio.Event | None = None) -> ScriptedAgent:
    """Calls ``deploy`` once, then says "Deployed."; ``inside`` is set while the tool runs
    (it never returns then: the server stops meanwhile)."""

    async def deploy(ctx: ToolCallContext) -> str:
        if inside is not None:
            inside.set()
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        return f"deployed {ctx.arguments['version']} again"

    return ScriptedAgent(
        turns=[
            [{"text": "Deploying."}, {"tool_call": {"name": "deploy", "arguments": DEPLOY_ARGS}}],
            "Deployed.",
        ],
        tools=[Tool("deploy", deploy)],
        loop=True,
        title="Deploy",
    )


async def session_in_doubt(db: Path) -> str:
    """The id of a session of ``db`` (the ``default`` agent is :func:`deploy_agent`) whose
    ``deploy`` call is in doubt after a crash."""
    inside = trio.Event()
    async with open_greenroom(deploy_agent(inside), store="sqlite", db_path=db) as gr:
        sid = str((await gr.client.create_session(title="Deploy"))["id"])
        await gr.client.run(sid, "deploy it")
        with trio.fail_after(10):
            await inside.wait()
    with sqlite3.connect(db) as conn:  # as a SIGKILL leaves it (see the module docstring)
        conn.execute("DELETE FROM items WHERE session_id = ? AND role = 'tool'", (sid,))
        conn.execute(
            "UPDATE turns SET state = 'running', ended_at = NULL, reason = '', last_seq = NULL"
            " WHERE session_id = ?",
            (sid,),
        )
        conn.execute("UPDATE tool_calls SET state = 'started' WHERE session_id = ?", (sid,))
        conn.execute("UPDATE heads SET state = 'running' WHERE session_id = ?", (sid,))
    conn.close()
    async with open_sqlite_store(db) as store:
        report = await recover(store)
    assert (report.turns_interrupted, report.calls_in_doubt) == (1, 1), report
    return sid
