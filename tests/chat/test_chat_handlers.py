"""``greenroom chat`` shows a tool call a hook blocked (issue 20: hooks)."""

from __future__ import annotations

from typing import Any, cast

from greenroom.chat._handlers import HANDLERS


class Out:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


class App:
    def __init__(self) -> None:
        self.out = Out()


def test_a_blocked_tool_call_is_shown_with_the_hook_s_reason() -> None:
    app = App()
    event = {
        "type": "hook_blocked",
        "tool_call": {"id": "c1", "function": {"name": "shell", "arguments": "{}"}},
        "message": "no rm -rf",
    }
    HANDLERS["hook_blocked"](cast(Any, app), cast(Any, event))
    assert app.out.notes == ["blocked by a hook: shell: no rm -rf"]
