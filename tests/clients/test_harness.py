"""greenroom.testing: the in-process server with scripted agents, driven by the client core.

These are the tests the harness promises its users: real turns, approvals, elicitations,
steer, follow-up, cancel, reconnects, on trio's autojump clock (memory store), so scripted
delays and reconnect backoffs pass in virtual time. One test runs on SQLite (real clock).
"""

from __future__ import annotations

import pytest
import trio

from greenroom.client import ApiError, Event
from greenroom.domain import Message
from greenroom.testing import ScriptedAgent, Tool, ToolCallContext, open_greenroom

LS = {"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}}}
APPROVAL_AGENT = ScriptedAgent(
    turns=[[{"text": "Let me look."}, LS], "There are two files."],
    tools=[Tool("shell", lambda ctx: _files(ctx), confirm=True)],
)


async def _files(ctx: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    return f"a.txt b.txt ({ctx.arguments['cmd']})"


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def text_of(events: list[Event]) -> str:
    return "".join(e["content"] for e in events if e.type == "agent_choice")


async def test_a_turn_streams_token_by_token(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(turns=[[{"text": ["Hel", "lo", "!"]}]])
    with trio.fail_after(30):
        async with open_greenroom(agent) as gr:
            session = await gr.client.create_session(title="t")
            async with gr.client.events(session["id"], 0) as events:
                await gr.client.run(session["id"], "hi")
                seen = await events.until("stream_stopped")
    assert [e["content"] for e in seen if e.type == "agent_choice"] == ["Hel", "lo", "!"]
    assert types(seen)[:2] == ["session_title", "stream_started"]  # a given title is re-announced
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))


async def test_reject_a_tool_call(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(30):
        async with open_greenroom(APPROVAL_AGENT) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "list the files")
                ask = await events.next_of("tool_call_confirmation")
                assert ask["tool_call"]["function"]["name"] == "shell"
                await gr.client.reject(sid, "not now")
                seen = await events.until("stream_stopped")
    [response] = [e for e in seen if e.type == "tool_call_response"]
    assert response["response"] == "The user rejected the tool call. Reason: not now"
    assert text_of(seen) == "There are two files."


async def test_approve_a_tool_call(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(30):
        async with open_greenroom(APPROVAL_AGENT) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "list the files")
                await events.next_of("tool_call_confirmation")
                await gr.client.approve(sid)
                seen = await events.until("stream_stopped")
            stored = await gr.client.session(sid)
    [response] = [e for e in seen if e.type == "tool_call_response"]
    assert response["response"] == "a.txt b.txt (ls)"
    roles = [m["message"]["role"] for m in stored["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def _ask_name(ctx: ToolCallContext) -> str:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    answer = await ctx.elicit("What is your name?", schema)
    if answer.action != "accept" or answer.content is None:
        return f"no name ({answer.action})"
    return f"hello {answer.content['name']}"


ELICIT_AGENT = ScriptedAgent(
    turns=[[{"tool_call": {"name": "ask_name", "arguments": {}}}], "Nice to meet you."],
    tools=[Tool("ask_name", _ask_name)],
)


@pytest.mark.parametrize(
    ("action", "content", "expected"),
    [("accept", {"name": "Ada"}, "hello Ada"), ("decline", None, "no name (decline)")],
)
async def test_answer_an_elicitation(
    autojump_clock: trio.abc.Clock, action: str, content: dict[str, str] | None, expected: str
) -> None:
    with trio.fail_after(30):
        async with open_greenroom(ELICIT_AGENT) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "hi")
                ask = await events.next_of("elicitation_request")
                assert ask["message"] == "What is your name?"
                await gr.client.answer_elicitation(
                    sid, action, content, elicitation_id=ask["elicitation_id"]
                )
                seen = await events.until("stream_stopped")
    [response] = [e for e in seen if e.type == "tool_call_response"]
    assert response["response"] == expected


async def test_cancel_a_running_turn(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(turns=[[{"text": "thinking"}, {"delay": 3600}, {"text": "never"}]])
    with trio.fail_after(30):
        async with open_greenroom(agent) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "hi")
                await events.next_of("agent_choice")
                assert await gr.client.cancel(sid) is True
                stopped = await events.next_of("stream_stopped")
            assert stopped["reason"] == "canceled"
            assert await gr.client.cancel(sid) is False


async def test_busy_session_refuses_a_second_run(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(turns=[[{"delay": 10}, {"text": "done"}]])
    with trio.fail_after(30):
        async with open_greenroom(agent) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "one")
                await events.next_of("stream_started")
                with pytest.raises(ApiError) as refused:
                    await gr.client.run(sid, "two")
                await events.next_of("stream_stopped")
    assert (refused.value.status, refused.value.code) == (409, "session_busy")


async def test_steer_and_follow_up(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(
        turns=[[{"text": "working"}, {"delay": 5}], "steered reply", "follow-up reply"]
    )
    with trio.fail_after(30):
        async with open_greenroom(agent) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "start")
                await events.next_of("agent_choice")
                await gr.client.steer(sid, "go left")
                assert await gr.client.follow_up(sid, "and then?") == "queued_streaming"
                seen = await events.until("stream_stopped")
    users = [e["message"] for e in seen if e.type == "user_message"]
    assert users == ["go left", "and then?"]
    assert text_of(seen) == "steered replyfollow-up reply"


async def test_events_resume_after_a_dropped_connection(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(
        turns=[[{"text": "one"}, {"delay": 1}, {"text": " two"}, {"delay": 1}, {"text": " three"}]]
    )
    states: list[str] = []
    with trio.fail_after(30):
        async with open_greenroom(agent) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0, on_state=states.append) as events:
                await gr.client.run(sid, "count")
                first = await events.next_of("agent_choice")
                assert gr.drop_connections() >= 1
                rest = await events.until("stream_stopped")
            assert events.reconnects >= 1
    seen = [first, *rest]
    assert text_of(seen) == "one two three"
    seqs = [e.seq for e in seen]
    assert seqs == sorted(set(seqs))  # nothing twice, in order
    assert "reconnecting" in states and states[-1] == "live"


async def test_title_comes_from_the_title_script(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(turns=["hi"], title="Greetings")
    with trio.fail_after(30):
        async with open_greenroom(agent) as gr:
            sid = (await gr.client.create_session())["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "hello")
                title = await events.next_of("session_title")
    assert title["title"] == "Greetings"


async def test_deleting_ends_the_event_stream(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(30):
        async with open_greenroom() as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "hello")
                await events.next_of("stream_stopped")
                await gr.client.delete_session(sid)
                rest = [e.type async for e in events]
    assert rest[-1] == "session_exited"


async def test_unknown_session_raises_from_the_stream(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(30):
        async with open_greenroom() as gr, gr.client.events("nope", 0) as events:
            with pytest.raises(ApiError) as raised:
                await events.next_of("stream_started")
    assert raised.value.status == 404


@pytest.mark.slow
async def test_sqlite_store_keeps_the_turn(tmp_path: object) -> None:
    """Real clock (SQLite works through threads)."""
    with trio.fail_after(30):
        async with open_greenroom(store="sqlite") as gr:
            sid = (await gr.client.create_session(title="kept"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "hello")
                await events.next_of("stream_stopped")
            stored = await gr.store.get_session(sid)
    contents = [m.message.content for m in stored.items if isinstance(m, Message)]
    assert contents == ["hello", "Hello from the scripted model."]


def test_public_names() -> None:
    import greenroom.testing

    assert set(greenroom.testing.__all__) == {
        "DEFAULT_SOURCE",
        "Greenroom",
        "ScriptedAgent",
        "StoreKind",
        "Tool",
        "ToolCallContext",
        "ToolHandler",
        "open_greenroom",
    }


def test_a_bad_script_fails_at_setup_naming_the_entry(tmp_path: object) -> None:
    from pathlib import Path

    from greenroom.errors import InvalidRequest

    agent = ScriptedAgent(turns=[[{"txt": "typo"}]])
    with pytest.raises(InvalidRequest) as raised:
        agent.write(Path(str(tmp_path)), "default")
    assert raised.value.path == "$.turns[0][0].txt"


async def test_a_log_goes_on_after_its_actor_retired(autojump_clock: trio.abc.Clock) -> None:
    """An idle session's actor retires and its log goes; the log is stored, so the next one
    goes on where it stopped: a client resuming after seq N gets N+1, ... and no gap."""
    from greenroom.actors import RegistryConfig

    agent = ScriptedAgent(turns=["a reply"], loop=True)
    with trio.fail_after(60):
        async with open_greenroom(agent, registry_config=RegistryConfig(idle_timeout=1)) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "one")
                await events.next_of("stream_stopped")
                resume_at = events.last_seq
            await trio.sleep(5)  # virtual: the idle actor retires, its log with it
            assert sid not in gr.registry.live_ids()
            async with gr.client.events(sid, resume_at) as events:
                await gr.client.run(sid, "two")
                seen = await events.until("stream_stopped")
    assert "gap" not in [e.type for e in seen]
    assert [e.seq for e in seen[:2]] == [resume_at + 1, resume_at + 2]  # one numbering
    assert text_of(seen) == "a reply"
