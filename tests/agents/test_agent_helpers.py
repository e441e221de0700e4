"""Pure helpers of the agent loop: slash commands, permission decisions, prompt building."""

from __future__ import annotations

import datetime as dt

import pytest

from greenroom.agents import (
    AgentConfig,
    Command,
    expand_command,
    parse_slash_command,
    resolve_agent_switch,
)
from greenroom.agents._prompt import NO_RESULT, build_messages
from greenroom.domain import (
    ChatMessage,
    ErrorItem,
    FunctionCall,
    Message,
    Session,
    SubSession,
    Summary,
    ToolCall,
)


@pytest.mark.parametrize(
    ("content", "parsed"),
    [
        ("/plan explain X", ("plan", "explain X")),
        ("  /plan  ", ("plan", "")),
        ("/build\nline two", ("build", "line two")),
        ("/go multi\nline", ("go", "multi\nline")),
        ("plan it", None),
        ("/ plan", None),
        ("//x", None),
    ],
)
def test_parse_slash_command(content: str, parsed: tuple[str, str] | None) -> None:
    assert parse_slash_command(content) == parsed


def test_resolve_agent_switch() -> None:
    commands = {
        "plan": Command(agent="planner"),
        "review": Command(instruction="Review ${args} carefully", agent="reviewer"),
        "fix": Command(instruction="Fix the bug"),
    }
    assert resolve_agent_switch(commands, "/plan explain X") == ("planner", "explain X")
    assert resolve_agent_switch(commands, "/review main.py") == (
        "reviewer",
        "Review main.py carefully",
    )
    assert resolve_agent_switch(commands, "/fix now") is None  # instruction-only
    assert resolve_agent_switch(commands, "/random-command x") is None
    assert resolve_agent_switch(commands, "no command") is None
    assert expand_command(Command(instruction="Fix the bug"), "in a.py") == "Fix the bug in a.py"


AGENT = AgentConfig(name="root", model="a/b", instruction="Be brief.", add_date=True)


def tool_call(call_id: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall("think", "{}"))


def msg(role: str, content: str = "", **fields) -> Message:
    return Message(ChatMessage(role=role, content=content, **fields))  # type: ignore[arg-type]


def test_prompt_repairs_tool_call_pairing_and_skips_non_messages() -> None:
    sub = Session.new(items=(msg("user", "inner"),))
    items = (
        msg("system", "stored system text is not sent"),
        msg("user", "u1"),
        msg("tool", "orphan", tool_call_id="zz"),
        msg("assistant", "", tool_calls=(tool_call("a"), tool_call("b"))),
        msg("tool", "ra", tool_call_id="a"),
        msg("tool", "ra again", tool_call_id="a"),
        SubSession(sub),
        ErrorItem("failed"),
        msg("user", "u2"),
    )
    messages = build_messages(Session.new(items=items), AGENT, today=dt.date(2026, 1, 2))
    assert [(m.role, m.content, m.tool_call_id) for m in messages] == [
        ("system", "Be brief.\n\nToday's date: 2026-01-02", ""),
        ("user", "u1", ""),
        ("assistant", "", ""),
        ("tool", "ra", "a"),
        ("tool", NO_RESULT, "b"),
        ("user", "u2", ""),
    ]
    assert messages[4].is_error


def test_prompt_starts_from_the_last_summary() -> None:
    items = (msg("user", "old"), Summary("they said hello"), msg("user", "new"))
    agent = AgentConfig(name="root", model="a/b")
    messages = build_messages(Session.new(items=items), agent)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "Summary of the conversation so far:\nthey said hello"),
        ("user", "new"),
    ]
