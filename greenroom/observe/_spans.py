"""The spans greenroom opens: each one's name and attributes, in one place.

Every layer calls one of these (``with model_call_span(...) as s:``) so its call site stays a
line, and docs/observability.md lists exactly what is here. Model and tool spans follow
OpenTelemetry's GenAI semantic conventions (``gen_ai.*``); greenroom's own attributes are
``greenroom.*``. While tracing is off each returns the shared no-op span at once, before it
builds any attribute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from ._tracing import NOOP_SPAN, Span, _state, span

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanContext

SESSION = "greenroom.session.id"


def command_span(
    session_id: str,
    command: object,
    sent_at: float = 0.0,
    expected: tuple[type[BaseException], ...] = (),
) -> AbstractContextManager[Span]:
    """``actor <Command>``: a session actor handling one mailbox command;
    ``greenroom.mailbox.wait_s`` is how long the command waited in the mailbox."""
    if _state.tracer is None:
        return NOOP_SPAN
    name = type(command).__name__
    attributes: dict[str, Any] = {SESSION: session_id, "greenroom.command": name}
    if sent_at:
        import trio

        attributes["greenroom.mailbox.wait_s"] = max(0.0, trio.current_time() - sent_at)
    return span(f"actor {name}", attributes, expected=expected)


def turn_span(session_id: str, turn_id: str, agent_name: str) -> AbstractContextManager[Span]:
    """``invoke_agent <agent>``: one turn of a session, from its runtime's start to its end
    (its state, ``greenroom.turn.state``, is set when it ends)."""
    if _state.tracer is None:
        return NOOP_SPAN
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_name,
        "gen_ai.conversation.id": session_id,
        SESSION: session_id,
        "greenroom.turn.id": turn_id,
    }
    return span(f"invoke_agent {agent_name}".rstrip(), attributes)


def model_call_span(
    provider: str,
    model: str,
    agent_name: str = "",
    max_tokens: int | None = None,
    *,
    operation: str = "chat",
    purpose: str = "turn",
) -> AbstractContextManager[Span]:
    """``chat <model>``: one model call, retries and a fallback's attempts included, made for
    a turn, a ``compaction`` or a ``title`` (``greenroom.model.purpose``). The first streamed
    token is the span event ``gen_ai.first_token`` (the time to it is the model's TTFT);
    :func:`record_model_response` adds what the answer said."""
    if _state.tracer is None:
        return NOOP_SPAN
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.system": provider,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "greenroom.model.purpose": purpose,
    }
    if agent_name:
        attributes["gen_ai.agent.name"] = agent_name
    if max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    return span(f"{operation} {model}", attributes, kind="client")


class _Usage(Protocol):
    @property
    def input_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...

    @property
    def cached_input_tokens(self) -> int: ...


class ModelAnswer(Protocol):
    """What :func:`record_model_response` reads of a model's answer (the providers'
    ``ModelResponse`` has it; observe imports no agents module)."""

    @property
    def model(self) -> str: ...

    @property
    def stop_reason(self) -> str: ...

    @property
    def tool_calls(self) -> Sequence[object]: ...

    @property
    def usage(self) -> _Usage: ...


def record_model_response(current: Span, answer: ModelAnswer) -> None:
    """The answer's model, token usage and finish reason on a :func:`model_call_span`."""
    if not current.is_recording():
        return
    usage = answer.usage
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.response.finish_reasons": (answer.stop_reason,) if answer.stop_reason else (),
        "greenroom.tool_calls": len(answer.tool_calls),
    }
    if answer.model:
        attributes["gen_ai.response.model"] = answer.model
    if usage.cached_input_tokens:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input_tokens
    current.set_attributes(attributes)


class FirstToken:
    """Marks the first streamed token of a model call on its span, once."""

    __slots__ = ("seen", "span")

    def __init__(self) -> None:
        self.span: Span = NOOP_SPAN
        self.seen = False

    def __call__(self) -> None:
        if not self.seen:
            self.seen = True
            self.span.add_event("gen_ai.first_token")


def tool_span(name: str, call_id: str, agent_name: str = "") -> AbstractContextManager[Span]:
    """``execute_tool <tool>``: one tool call, from its checks (and approval) to its result
    (``greenroom.tool.is_error``)."""
    if _state.tracer is None:
        return NOOP_SPAN
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
    }
    if agent_name:
        attributes["gen_ai.agent.name"] = agent_name
    return span(f"execute_tool {name}", attributes)


def approval_span(tool: str, call_id: str, rule: str = "") -> AbstractContextManager[Span]:
    """``approval wait``: a tool call waiting for a person's answer (child of its
    ``execute_tool``); ``greenroom.approval.answer`` says what came back (``none``: no
    answer in time)."""
    if _state.tracer is None:
        return NOOP_SPAN
    attributes = {"gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id}
    if rule:
        attributes["greenroom.approval.rule"] = rule
    return span("approval wait", attributes)


def mcp_call_span(server: str, tool: str) -> AbstractContextManager[Span]:
    """``mcp tools/call <tool>``: one call to an MCP server (the MCP SDK's own client span
    and the HTTP request, which carries ``traceparent``, nest under it)."""
    if _state.tracer is None:
        return NOOP_SPAN
    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": tool,
        "greenroom.mcp.server": server,
    }
    return span(f"mcp tools/call {tool}", attributes, kind="client")


def store_write_span(store: str) -> AbstractContextManager[Span]:
    """``store write``: a caller waiting for its write's commit (queue, batch, transaction)."""
    if _state.tracer is None:
        return NOOP_SPAN
    return span("store write", {"greenroom.store": store})


def commit_span(
    store: str, jobs: int, events: int, links: Iterable[SpanContext | None]
) -> AbstractContextManager[Span]:
    """``store commit``: one group-commit transaction on the writer thread, a root span
    linked to the ``store write`` spans whose writes it carries. A batch that carries no
    traced write (only write-behind event rows, the bulk of a streaming turn's commits) has
    no span: no trace could reach it, and a span per commit was most of tracing's cost."""
    if _state.tracer is None:
        return NOOP_SPAN
    found = [link for link in links if link is not None]
    if not found:
        return NOOP_SPAN
    attributes = {
        "greenroom.store": store,
        "greenroom.batch.jobs": jobs,
        "greenroom.batch.events": events,
    }
    return span("store commit", attributes, links=found)


def forward_span(method: str, node: str, target: str) -> AbstractContextManager[Span]:
    """``forward <METHOD>``: a request sent on to the node that owns its session (the peer's
    server span is its child, through ``traceparent``)."""
    if _state.tracer is None:
        return NOOP_SPAN
    attributes = {
        "http.request.method": method,
        "url.path": target.split("?", 1)[0],
        "greenroom.forward.node": node,
    }
    return span(f"forward {method}", attributes, kind="client")


def server_span(
    name: str, attributes: Mapping[str, Any], context: Context | None
) -> AbstractContextManager[Span]:
    """A request greenroom serves: ``<METHOD> <route>`` (HTTP) or ``ws <op>`` (a WebSocket
    op), under the caller's ``traceparent`` when it sent one, else a new trace."""
    if _state.tracer is None:
        return NOOP_SPAN
    return span(name, attributes, kind="server", context=context)
