"""What ``greenroom chat`` asks a person while a turn waits: tool approvals (the tool, its
arguments and the permission rule that asks, before the question) and the agent's questions
(elicitation forms, one field a line).

The answers come from the chat's one input line (``Asker.answer``): the same prompt that steers a
running turn takes the answer while a question is open.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from greenroom.client import Event, GreenroomClient

from ._output import Output

MAX_ARGUMENT_LINES = 12
MAX_ARGUMENT_CHARS = 1500


class Asker(Protocol):
    client: GreenroomClient
    out: Output
    session_id: str

    async def answer(self, prompt: str) -> str:
        """The next line the person types (KeyboardInterrupt on Ctrl-C)."""
        ...

    async def cancel_turn(self) -> None: ...


def pretty_arguments(arguments: Any) -> str:
    """Tool arguments as indented JSON (as given when they are not JSON)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
        return json.dumps(value if value is not None else {}, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


def truncated(text: str) -> tuple[str, bool]:
    """The first lines of ``text`` (at most MAX_ARGUMENT_LINES and MAX_ARGUMENT_CHARS); whether
    something was left out."""
    lines = text.splitlines()
    shown = "\n".join(lines[:MAX_ARGUMENT_LINES])
    if len(shown) > MAX_ARGUMENT_CHARS:
        shown = shown[:MAX_ARGUMENT_CHARS]
    return shown, shown != text


async def answer_confirmation(app: Asker, event: Event) -> None:
    """Show the call (tool, arguments, rule) and ask until the answer is one of the choices."""
    call = event.get("tool_call") or {}
    function = call.get("function") or {}
    name = function.get("name", "?")
    full = pretty_arguments(function.get("arguments"))
    shown, cut = truncated(full)
    agent = event.get("agent_name") or "the agent"
    app.out.line(f"{agent} wants to run {name} with:", "bold yellow")
    for line in shown.splitlines():
        app.out.line(f"  {line}")
    if cut:
        rest = len(full) - len(shown)
        app.out.note(f"  … {rest} more characters: [v]iew all")
    rule = event.get("permission_rule") or ""
    if rule:
        app.out.line(f"it asks because of: {rule}")
    choices = f"approve {name}? [y]es / [n]o / [t]en minutes of {name} / [a]lways allow {name}"
    app.out.line(choices + (" / [v]iew all" if cut else ""), "bold yellow")
    while True:
        try:
            answer = (await app.answer("approve> ")).strip().lower()
        except KeyboardInterrupt:
            answer = "cancel"
        if answer in ("v", "view") and cut:
            for line in full.splitlines():
                app.out.line(f"  {line}")
            continue
        if answer in ("y", "yes"):
            await app.client.approve(app.session_id)
        elif answer in ("t", "ten"):
            await app.client.resume(app.session_id, "approve-tool", tool_name=name, expires_in=600)
        elif answer in ("a", "always"):
            await app.client.resume(app.session_id, "approve-tool", tool_name=name)
        elif answer in ("n", "no"):
            try:
                reason = await app.answer("reason (optional)> ")
            except KeyboardInterrupt:
                reason = ""
            await app.client.reject(app.session_id, reason.strip())
        elif answer == "cancel":
            await app.client.reject(app.session_id, "cancelled")
            await app.cancel_turn()
        else:
            app.out.note("answer y, n, t or a" + (" (v shows all the arguments)" if cut else ""))
            continue
        return


async def answer_continuation(app: Asker, event: Event) -> None:
    """The turn made its ``max_iterations`` model calls: 10 more, or stop."""
    limit = event.get("max_iterations", "?")
    app.out.line(f"the agent reached its limit of {limit} iterations", "bold yellow")
    try:
        answer = (await app.answer("continue for 10 more? [y]es / [n]o> ")).strip().lower()
    except KeyboardInterrupt:
        answer = "n"
    if answer in ("y", "yes"):
        await app.client.approve(app.session_id)
    else:
        await app.client.reject(app.session_id, "stopped at max_iterations")


async def answer_elicitation(app: Asker, event: Event) -> None:
    app.out.line(f"the agent asks: {event.get('message', '')}", "bold yellow")
    schema = event.get("schema") or {}
    content: dict[str, Any] = {}
    required = set(schema.get("required") or [])
    try:
        for name, prop in (schema.get("properties") or {}).items():
            value = await ask_field(app, name, prop, name in required)
            if value is not None:
                content[name] = value
        action = "accept"
        if not schema.get("properties"):
            answer = (await app.answer("[a]ccept / [d]ecline> ")).strip().lower()
            action = "accept" if answer.startswith("a") else "decline"
    except KeyboardInterrupt:
        action, content = "cancel", {}
    await app.client.answer_elicitation(
        app.session_id, action, content, elicitation_id=event.get("elicitation_id", "")
    )


async def ask_field(app: Asker, name: str, prop: dict[str, Any], required: bool) -> Any:
    label = prop.get("title") or name
    kind = prop.get("type", "string")
    hint = f" ({'/'.join(map(str, prop['enum']))})" if prop.get("enum") else ""
    hint += " [y/n]" if kind == "boolean" else ""
    while True:
        text = (await app.answer(f"{label}{hint}{'' if required else ' (optional)'}> ")).strip()
        if not text and not required:
            return None
        try:
            if kind == "boolean":
                return text.lower() in ("y", "yes", "true", "1")
            if kind == "integer":
                return int(text)
            if kind == "number":
                return float(text)
        except ValueError:
            app.out.error(f"{label}: {'a whole number' if kind == 'integer' else 'a number'}")
            continue
        if prop.get("enum") and text not in map(str, prop["enum"]):
            app.out.error(f"pick one of {', '.join(map(str, prop['enum']))}")
            continue
        if text or not required:
            return text


async def decide_in_doubt(app: Asker, call: dict[str, Any]) -> str:
    """Ask what became of a tool call left in doubt by a crash; returns the action sent."""
    name = call.get("name", "?")
    app.out.line(
        f"the server stopped while {name} ran; it may or may not have had its effect:",
        "bold yellow",
    )
    shown, _ = truncated(pretty_arguments(call.get("arguments")))
    for line in shown.splitlines():
        app.out.line(f"  {line}")
    actions = {"s": "skip", "r": "rerun", "d": "done"}
    while True:
        answer = await app.answer("[s]kip (it did not run) / [r]erun / [d]one (it ran)> ")
        action = actions.get(answer.strip().lower()[:1])
        if action is not None:
            return action
        app.out.note("answer s, r or d")
