"""The operation table: every API operation once, served by REST and by WebSocket alike.

An operation names its REST route and WebSocket op, the body class it parses, its success
status and the statuses it documents; its handler (``_server_endpoints.py``,
``_session_endpoints.py``, ``_turn_endpoints.py``) gets a ``Request`` (path parameters or frame
keys, query, headers, parsed body) and returns a ``Reply``. Streaming operations return a stream
that each transport delivers its own way (``Operation.stream`` says which kind).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from greenroom.errors import GreenroomError, SessionNotFound, SessionNotRunning

from . import _bodies as b, _params as q
from ._context import AgentCatalog, AppConfig, Context, Handler, Reply, Request
from ._run_endpoints import RUN_OPERATIONS
from ._schedule_endpoints import SCHEDULE_OPERATIONS
from ._server_endpoints import (
    agent_tool_count,
    api_ready,
    get_agent,
    health,
    list_agents,
    mcp_oauth_callback,
    mcp_oauth_landing,
    ping,
    ready,
)
from ._session_endpoints import (
    add_message,
    add_summary,
    approvals,
    batch_delete,
    batch_export_sessions,
    create_session,
    delete_session,
    fork,
    get_session,
    recovery,
    set_permissions,
    set_safety_policy,
    set_starred,
    set_title,
    set_tokens,
    snapshot,
    toggle_thinking,
    toggle_tools,
    update_message,
)
from ._session_search import SEARCH_PARAMS, list_or_search_sessions
from ._turn_endpoints import (
    answer_elicitation,
    cancel_turn,
    compact,
    decide,
    follow_up,
    list_models,
    pending_decisions,
    queue_depth,
    resume,
    session_status,
    start_run,
    steer,
    subscribe_events,
)

__all__ = ["AgentCatalog", "AppConfig", "Context", "Handler", "Operation", "Reply", "Request"]


# What a streaming operation's handler returns, so each transport knows how to deliver it:
# "run", a turn's RunStream (its events, then its end); "log", a Subscription to the session's
# event log (a replay after a seq, then the live tail).
StreamKind = Literal["run", "log"]


@attrs.frozen
class Operation:
    name: str  # the WebSocket op
    method: str
    path: str  # REST route, parameters as {name}
    handler: Handler
    summary: str
    body: type[Any] | None = None
    body_required: bool = True
    array_body: str | None = None  # REST: a bare JSON array is the body's value of this field
    success: int = 200
    also: tuple[int, ...] = ()  # other success statuses (delete: 202 while still stopping)
    errors: tuple[int, ...] = ()
    overrides: Mapping[type[GreenroomError], tuple[int, str | None]] = attrs.field(factory=dict)
    query: tuple[q.Param, ...] = ()
    header_params: tuple[q.Param, ...] = ()
    stream: StreamKind | None = None  # a streaming operation: what its handler returns
    rest: bool = True
    websocket: bool = True
    public: bool = False  # no bearer token needed, and no Host check (probes)
    bearer: bool = True  # False: no bearer token needed (the other edge checks apply)

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(re.findall(r"{(\w+)}", self.path))


# --- the table -------------------------------------------------------------------------------

S = "/api/sessions/{session_id}"
MCP_OAUTH_LANDING = "/mcp-oauth/callback"
NOT_RUNNING_404: Mapping[type[GreenroomError], tuple[int, str | None]] = {
    SessionNotRunning: (404, None)
}
COMMON = (400, 404, 409)

OPERATIONS: tuple[Operation, ...] = (
    Operation("health", "GET", "/health", health, "Liveness", public=True, errors=()),
    Operation("ready", "GET", "/ready", ready, "Store readiness", public=True, errors=(503,)),
    Operation("ping", "GET", "/api/ping", ping, "Ping"),
    Operation(
        "wait_ready",
        "GET",
        "/api/ready",
        api_ready,
        "Wait until a session has a runtime",
        query=(q.TIMEOUT,),
        errors=(400, 503),
    ),
    Operation("list_agents", "GET", "/api/agents", list_agents, "List agent sources"),
    Operation(
        "get_agent",
        "GET",
        "/api/agents/{agent_id}",
        get_agent,
        "An agent source's parsed configuration",
        errors=(404, 502),
    ),
    Operation(
        "agent_tool_count",
        "GET",
        "/api/agents/{agent_id}/{agent_name}/tools/count",
        agent_tool_count,
        "Number of tools of an agent",
        errors=(404, 502),
    ),
    Operation(
        "list",
        "GET",
        "/api/sessions",
        list_or_search_sessions,
        "List root sessions: without parameters all of them (an array); with any search "
        "parameter one page of the matches ({sessions, next_cursor})",
        query=SEARCH_PARAMS,
        errors=(400,),
    ),
    Operation(
        "create",
        "POST",
        "/api/sessions",
        create_session,
        "Create a session",
        body=b.SessionTemplate,
        body_required=False,
        errors=(400,),
    ),
    Operation(
        "batch_delete",
        "POST",
        "/api/sessions/batch/delete",
        batch_delete,
        "Delete many sessions",
        body=b.BatchBody,
        errors=(400,),
    ),
    Operation(
        "batch_export",
        "POST",
        "/api/sessions/batch/export",
        batch_export_sessions,
        "Export many sessions",
        body=b.BatchBody,
        errors=(400,),
    ),
    Operation("get", "GET", S, get_session, "A session with its visible messages", errors=(404,)),
    Operation(
        "status",
        "GET",
        f"{S}/status",
        session_status,
        "Live runtime status",
        query=(q.WAIT_DURATION,),
        overrides=NOT_RUNNING_404,
        errors=(400, 404, 503),
    ),
    Operation(
        "snapshot",
        "GET",
        f"{S}/snapshot",
        snapshot,
        "Full state and the last event seq, for resync",
        overrides={SessionNotFound: (404, "unknown_session")},
        errors=(404,),
    ),
    Operation(
        "fork",
        "POST",
        f"{S}/fork",
        fork,
        "Fork before the Nth user message",
        body=b.ForkBody,
        errors=(400, 404),
    ),
    Operation(
        "delete",
        "DELETE",
        S,
        delete_session,
        "Delete a session",
        query=(q.WAIT_FLAG, q.TIMEOUT),
        also=(202,),
        errors=(400, 404),
    ),
    Operation(
        "run",
        "POST",
        f"{S}/agent/{{agent}}",
        start_run,
        "Run a turn with the source's default agent (SSE)",
        body=b.RunBody,
        array_body="messages",
        query=(q.ON_DISCONNECT, q.RUN_WAIT),
        header_params=(q.ACCEPT,),
        stream="run",
        errors=(400, 404, 409, 422, 502),
    ),
    Operation(
        "run_agent",
        "POST",
        f"{S}/agent/{{agent}}/{{agent_name}}",
        start_run,
        "Run a turn with a named agent (SSE)",
        body=b.RunBody,
        array_body="messages",
        query=(q.ON_DISCONNECT, q.RUN_WAIT),
        header_params=(q.ACCEPT,),
        stream="run",
        errors=(400, 404, 409, 422, 502),
        websocket=False,
    ),
    *(Operation(*row, **options) for row, options in RUN_OPERATIONS),  # _run_endpoints.py
    Operation(
        "events",
        "GET",
        f"{S}/events",
        subscribe_events,
        "The session's event log: replay after since / Last-Event-ID, then live tail (SSE)",
        query=(q.SINCE,),
        header_params=(q.LAST_EVENT_ID,),
        stream="log",
        websocket=False,  # the WebSocket has subscribe / unsubscribe
        errors=(404,),
    ),
    Operation(
        "elicitation",
        "POST",
        f"{S}/elicitation",
        answer_elicitation,
        "Answer an elicitation request",
        body=b.ElicitationBody,
        errors=COMMON,
    ),
    Operation(
        "cancel",
        "POST",
        f"{S}/cancel",
        cancel_turn,
        "Cancel the running turn (greenroom extension)",
        errors=(404,),
    ),
    Operation(
        "compact",
        "POST",
        f"{S}/compact",
        compact,
        "Compact the history now: the agent's model summarises it (greenroom extension; "
        "session_compaction and session_summary events follow on the event log)",
        body=b.CompactBody,
        body_required=False,
        success=202,
        errors=(*COMMON, 422),
    ),
    Operation(
        "steer",
        "POST",
        f"{S}/steer",
        steer,
        "Inject messages into the running turn",
        body=b.QueueBody,
        success=202,
        errors=(*COMMON, 429),
    ),
    Operation(
        "followup",
        "POST",
        f"{S}/followup",
        follow_up,
        "Queue messages for the end of the turn",
        body=b.QueueBody,
        success=202,
        header_params=(q.IDEMPOTENCY_KEY,),
        errors=(*COMMON, 429),
    ),
    Operation(
        "resume",
        "POST",
        f"{S}/resume",
        resume,
        "Answer a tool-call confirmation",
        body=b.ResumeBody,
        errors=COMMON,
    ),
    Operation(
        "approvals",
        "GET",
        f"{S}/approvals",
        approvals,
        "The audited tool-call decisions of a session",
        errors=(404,),
    ),
    Operation(
        "toggle_tools",
        "POST",
        f"{S}/tools/toggle",
        toggle_tools,
        "Toggle automatic tool approval",
        errors=(404,),
    ),
    Operation(
        "toggle_thinking",
        "POST",
        f"{S}/thinking/toggle",
        toggle_thinking,
        "Toggle the session's thinking mode (model reasoning)",
        errors=(404,),
    ),
    Operation(
        "set_safety_policy",
        "PATCH",
        f"{S}/safety-policy",
        set_safety_policy,
        "Set the safety policy",
        body=b.SafetyPolicyBody,
        errors=(400, 404),
    ),
    Operation(
        "set_permissions",
        "PATCH",
        f"{S}/permissions",
        set_permissions,
        "Replace the allow/ask/deny patterns",
        body=b.PermissionsBody,
        errors=(400, 404),
    ),
    Operation(
        "set_title",
        "PATCH",
        f"{S}/title",
        set_title,
        "Set the title",
        body=b.TitleBody,
        errors=(400, 404),
    ),
    Operation(
        "set_tokens",
        "PATCH",
        f"{S}/tokens",
        set_tokens,
        "Overwrite token counters",
        body=b.TokensBody,
        errors=(400, 404),
    ),
    Operation(
        "set_starred",
        "PATCH",
        f"{S}/starred",
        set_starred,
        "Star or unstar",
        body=b.StarredBody,
        errors=(400, 404),
    ),
    Operation(
        "models",
        "GET",
        f"{S}/models",
        list_models,
        "Model picker of the current agent",
        overrides=NOT_RUNNING_404,
        errors=(404, 422),
    ),
    Operation(
        "add_message",
        "POST",
        f"{S}/messages",
        add_message,
        "Append a stored message",
        body=b.MessageBody,
        success=201,
        errors=COMMON,
    ),
    Operation(
        "update_message",
        "PATCH",
        f"{S}/messages/{{message_id}}",
        update_message,
        "Replace a stored message",
        body=b.MessageBody,
        errors=COMMON,
    ),
    Operation(
        "add_summary",
        "POST",
        f"{S}/summaries",
        add_summary,
        "Append a compaction summary",
        body=b.SummaryBody,
        success=201,
        errors=(400, 404),
    ),
    Operation(
        "queue",
        "GET",
        f"{S}/queue",
        queue_depth,
        "Steer and follow-up queue depth",
        overrides=NOT_RUNNING_404,
        errors=(404,),
    ),
    Operation(
        "recovery", "GET", f"{S}/recovery", recovery, "Recovery export (with errors)", errors=(404,)
    ),
    Operation(
        "recovery_decisions",
        "GET",
        f"{S}/recovery/decisions",
        pending_decisions,
        "Tool calls left in doubt by a crash, waiting for a decision",
        errors=(404,),
    ),
    Operation(
        "recovery_decide",
        "POST",
        f"{S}/recovery/decisions",
        decide,
        "Decide a tool call in doubt: rerun, done or skip (a rerun answers once it ran)",
        body=b.DecisionBody,
        errors=(400, 404, 409, 422, 502),
    ),
    Operation(
        "mcp_oauth_callback",
        "POST",
        "/api/mcp-oauth/callback",
        mcp_oauth_callback,
        "Deliver an OAuth redirect (state and code, or error) to a waiting MCP OAuth flow",
        query=q.OAUTH_REDIRECT,
        errors=(400, 404),
    ),
    Operation(
        "mcp_oauth_landing",
        "GET",
        MCP_OAUTH_LANDING,
        mcp_oauth_landing,
        "Where a browser lands after authorizing an MCP server (the default redirect URI); "
        "no bearer token: the unguessable state is the credential",
        query=q.OAUTH_REDIRECT,
        errors=(400, 404),
        websocket=False,
        bearer=False,
    ),
)

# Scheduled runs (decision 0028): their rows are in _schedule_endpoints.py.
OPERATIONS += tuple(Operation(*row, **options) for row, options in SCHEDULE_OPERATIONS)

BY_NAME = {op.name: op for op in OPERATIONS}
