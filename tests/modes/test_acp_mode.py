"""``greenroom serve acp``: the ACP Python SDK's client (``agent-client-protocol``, on asyncio)
against the real command as a child process, and a scripted JSON-RPC client (on trio) for the
input no SDK sends. The agents are scripted (no network)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import trio
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

from greenroom.testing import ScriptedAgent
from tests.modes.test_mcp_mode import SHELL, messages, only_session
from tests.slowness import slow

pytestmark = pytest.mark.slow

ANSWERS = ScriptedAgent(
    turns=[[{"reasoning": "Thinking."}, {"text": ["The", " answer"]}, {"text": " is 42."}]],
    loop=True,
)
SLOW = ScriptedAgent(
    turns=[[{"text": "Working"}, {"delay": 600}, {"text": " never"}], "Second answer."]
)
COMMAND = [sys.executable, "-m", "greenroom.cli", "serve", "acp"]


class Editor:
    """An ACP client: keeps every update, answers permission requests with ``choice``."""

    def __init__(self, choice: str = "allow") -> None:
        self.choice = choice
        self.updates: list[Any] = []
        self.asked: list[tuple[Any, list[str]]] = []
        self.first_chunk = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        if update.session_update == "agent_message_chunk":
            self.first_chunk.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append((tool_call, [o.option_id for o in options]))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.choice)
        )

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def said(self) -> str:
        return "".join(
            u.content.text for u in self.updates if u.session_update == "agent_message_chunk"
        )


def run_editor(agent_file: Path, editor: Editor, script: Any, *extra: str) -> Any:
    """Spawn ``greenroom serve acp AGENT_FILE`` and run ``script(conn, cwd)`` against it;
    leaving closes its stdin, then the SDK ends the child (terminate, then kill)."""

    async def main() -> Any:
        async with spawn_agent_process(cast(Any, editor), *COMMAND, str(agent_file), *extra) as (
            conn,
            _,
        ):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert init.protocol_version == PROTOCOL_VERSION
            assert init.agent_info is not None and init.agent_info.name == "greenroom"
            return await script(conn, str(agent_file.parent))

    # real clock: a child interpreter starts, loads greenroom and runs scripted turns
    return asyncio.run(asyncio.wait_for(main(), slow(60)))


def test_a_prompt_streams_chunks_and_ends_the_turn(tmp_path: Path) -> None:
    db = tmp_path / "acp.sqlite3"
    editor = Editor()

    async def script(conn: Any, cwd: str) -> Any:
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        return await conn.prompt(session_id=session.session_id, prompt=[text_block("what?")])

    answer = run_editor(ANSWERS.write(tmp_path, "answers"), editor, script, "--db", str(db))
    assert answer.stop_reason == "end_turn"
    assert editor.said() == "The answer is 42."
    assert "agent_thought_chunk" in editor.kinds()
    stored = trio.run(only_session, db)
    assert stored.working_dir == str(tmp_path)
    texts = [(m.role, m.content) for m in messages(stored)]
    assert texts == [("user", "what?"), ("assistant", "The answer is 42.")]


@pytest.mark.parametrize(("choice", "ran"), [("allow", True), ("reject", False)])
def test_a_tool_call_asks_the_editor(tmp_path: Path, choice: str, ran: bool) -> None:
    db = tmp_path / "acp.sqlite3"
    editor = Editor(choice)

    async def script(conn: Any, cwd: str) -> Any:
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        return await conn.prompt(session_id=session.session_id, prompt=[text_block("run it")])

    answer = run_editor(SHELL.write(tmp_path, "shell"), editor, script, "--db", str(db))
    assert answer.stop_reason == "end_turn"
    [(tool_call, options)] = editor.asked
    assert tool_call.kind == "execute"
    assert tool_call.raw_input == {"cmd": "echo ran-it"}
    assert options == ["allow", "allow-always", "reject"]
    # Announced before the question, then its progress: running (if allowed), then done.
    [announced] = [u for u in editor.updates if u.session_update == "tool_call"]
    assert (announced.tool_call_id, announced.status) == (tool_call.tool_call_id, "pending")
    progress = [u for u in editor.updates if u.session_update == "tool_call_update"]
    assert {u.tool_call_id for u in progress} == {tool_call.tool_call_id}
    statuses = [u.status for u in progress]
    assert statuses == (["in_progress", "completed"] if ran else ["completed"])
    assert ("ran-it" in progress[-1].raw_output["content"]) is ran
    assert editor.said() == "Done with the shell."
    stored = trio.run(only_session, db)
    expected = "approve" if ran else "reject"
    assert [(a.decision, a.decided_by) for a in stored.approvals] == [(expected, "acp")]


def test_cancel_ends_a_running_prompt(tmp_path: Path) -> None:
    editor = Editor()

    async def script(conn: Any, cwd: str) -> Any:
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        sid = session.session_id
        running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("go")]))
        await editor.first_chunk.wait()
        await conn.cancel(session_id=sid)
        cancelled = await running
        # The session takes the next prompt at once.
        again = await conn.prompt(session_id=sid, prompt=[text_block("again")])
        return cancelled, again

    cancelled, again = run_editor(SLOW.write(tmp_path, "slow"), editor, script)
    assert cancelled.stop_reason == "cancelled"
    assert again.stop_reason == "end_turn"
    assert editor.said() == "WorkingSecond answer."


def test_cancel_while_the_editor_is_asked_withdraws_the_question(tmp_path: Path) -> None:
    db = tmp_path / "acp.sqlite3"

    class Cancelling(Editor):
        """Cancels the prompt when asked, then answers ``cancelled`` (as the spec says)."""

        conn: Any = None

        async def request_permission(
            self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
        ) -> RequestPermissionResponse:
            self.asked.append((tool_call, []))
            await self.conn.cancel(session_id=session_id)
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    editor = Cancelling()

    async def script(conn: Any, cwd: str) -> Any:
        editor.conn = conn
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        return await conn.prompt(session_id=session.session_id, prompt=[text_block("run it")])

    answer = run_editor(SHELL.write(tmp_path, "shell"), editor, script, "--db", str(db))
    assert answer.stop_reason == "cancelled"
    assert len(editor.asked) == 1
    stored = trio.run(only_session, db)
    assert all("ran-it" not in m.content for m in messages(stored))


def test_bad_requests_are_errors_that_say_what_to_do(tmp_path: Path) -> None:
    async def script(conn: Any, cwd: str) -> Any:
        errors = []
        for call in (
            conn.prompt(session_id="nope", prompt=[text_block("hi")]),
            conn.new_session(cwd="relative/dir", mcp_servers=[]),
            conn.new_session(cwd=str(Path(cwd) / "missing"), mcp_servers=[]),
        ):
            with pytest.raises(RequestError) as caught:
                await call
            errors.append((caught.value.code, str(caught.value)))
        return errors

    errors = run_editor(ANSWERS.write(tmp_path, "answers"), Editor(), script)
    assert [code for code, _ in errors] == [-32602, -32602, -32602]
    assert "open one with session/new" in errors[0][1]
    assert "absolute path" in errors[1][1]
    assert "not a directory" in errors[2][1]


async def test_malformed_json_rpc_is_answered_with_errors(tmp_path: Path) -> None:
    """A scripted client on the child's stdio: what the SDK never sends."""
    agent = ANSWERS.write(tmp_path, "answers")
    lines = [
        b"this is not json\n",
        b'{"jsonrpc": "2.0", "id": 1, "method": "session/fly", "params": {}}\n',
        b"[1, 2]\n",
        b'{"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "x", '
        b'"prompt": "a string"}}\n',
        b'{"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": 1}}\n',
    ]
    answers: list[dict[str, Any]] = []
    process = await trio.lowlevel.open_process(
        [*COMMAND, str(agent)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        with trio.fail_after(slow(60)):  # real clock: a child interpreter starts and answers
            for line in lines:  # one at a time: each answer before the next question
                await process.stdin.send_all(line)
                answers.append(await read_answer(process.stdout))
            await process.stdin.aclose()  # the child ends at the end of its input
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    codes = [a.get("error", {}).get("code") for a in answers]
    assert codes == [-32700, -32601, -32600, -32602, None]
    assert "session/prompt" in answers[1]["error"]["message"]  # the methods it answers
    assert answers[4]["result"]["protocolVersion"] == 1
    assert process.returncode == 0


async def read_answer(stdout: Any) -> dict[str, Any]:
    buffer = b""
    while not buffer.endswith(b"\n"):
        chunk = await stdout.receive_some(1)  # byte by byte: nothing of the next answer
        assert chunk, f"the child closed stdout after {buffer!r}"
        buffer += chunk
    answer: dict[str, Any] = json.loads(buffer)
    return answer
