"""How ``greenroom chat`` shows each event of the session's log (one small function each)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from greenroom.client import Event

if TYPE_CHECKING:
    from ._app import ChatApp


def context_use(length: int, limit: int) -> str:
    """`` | context 12% of 128000`` when the model's window is known, else ``""``."""
    if not limit:
        return ""
    return f" | context {round(100 * length / limit)}% of {limit}"


def _on_stream_started(app: ChatApp, event: Event) -> None:
    app.running = True
    app.refresh_prompt()


def _on_text(app: ChatApp, event: Event) -> None:
    app.out.token(event.get("content", ""))


def _on_reasoning(app: ChatApp, event: Event) -> None:
    app.out.token(event.get("content", ""), reasoning=True)


def _on_tool_call(app: ChatApp, event: Event) -> None:
    app.out.tool_call(event.get("tool_call") or {})


def _on_confirmation(app: ChatApp, event: Event) -> None:
    app.signal(event)


def _on_tool_response(app: ChatApp, event: Event) -> None:
    app.out.tool_result(event.get("response", ""))


def _on_user_message(app: ChatApp, event: Event) -> None:
    app.out.line(f"you (queued): {event.get('message', '')}")


def _on_usage(app: ChatApp, event: Event) -> None:
    usage = event.get("usage") or {}
    cost = usage.get("cost") or 0.0  # null: the model's price is unknown
    app.usage = (usage.get("input_tokens", 0), usage.get("output_tokens", 0), cost)
    app.context = (usage.get("context_length", 0) or 0, usage.get("context_limit", 0) or 0)


def _on_title(app: ChatApp, event: Event) -> None:
    app.title = event.get("title", "")


def _on_error(app: ChatApp, event: Event) -> None:
    app.out.error(event.get("error", "the turn failed"))


def _on_warning(app: ChatApp, event: Event) -> None:
    app.out.note(f"warning: {event.get('message', '')}")


def _on_hook_blocked(app: ChatApp, event: Event) -> None:
    name = (event.get("tool_call") or {}).get("function", {}).get("name", "a tool")
    app.out.note(f"blocked by a hook: {name}: {event.get('message', '')}")


def _on_stopped(app: ChatApp, event: Event) -> None:
    app.out.end_stream()
    if event.get("reason") == "canceled":
        app.out.note("(turn cancelled)")
    tokens_in, tokens_out, cost = app.usage
    spent = f" / ${cost:.4f}" if cost else ""
    used = context_use(*app.context)
    app.out.note(
        f"[{app.title or 'untitled'} | tokens {tokens_in} in / {tokens_out} out{spent}{used}]"
    )
    app.running = False
    app.refresh_prompt()
    app.signal(event)


def _on_agent_info(app: ChatApp, event: Event) -> None:
    app.running_model = event.get("model", "")  # what runs, also when the file says "auto"


def _on_interrupted(app: ChatApp, event: Event) -> None:
    app.out.note("the server stopped during this turn: it was interrupted")


def _on_in_doubt(app: ChatApp, event: Event) -> None:
    name = ((event.get("tool_call") or {}).get("function") or {}).get("name", "?")
    app.out.note(f"{name} is in doubt: decide it before the session runs again")


def _on_exited(app: ChatApp, event: Event) -> None:
    app.out.note("this session was deleted")
    app.running = False
    app.signal(event)


HANDLERS: dict[str, Callable[[ChatApp, Event], None]] = {
    "stream_started": _on_stream_started,
    "agent_choice": _on_text,
    "agent_choice_reasoning": _on_reasoning,
    "tool_call": _on_tool_call,
    "tool_call_confirmation": _on_confirmation,
    "elicitation_request": _on_confirmation,
    "max_iterations_reached": _on_confirmation,
    "tool_call_response": _on_tool_response,
    "user_message": _on_user_message,
    "token_usage": _on_usage,
    "session_title": _on_title,
    "error": _on_error,
    "warning": _on_warning,
    "hook_blocked": _on_hook_blocked,
    "stream_stopped": _on_stopped,
    "session_exited": _on_exited,
    "turn_interrupted": _on_interrupted,
    "agent_info": _on_agent_info,
    "tool_call_in_doubt": _on_in_doubt,
}
