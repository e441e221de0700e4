"""``GET /openapi.json``: an OpenAPI 3.1 document built from the operation table and the attrs
request types, so the document and the routes cannot drift apart."""

from __future__ import annotations

import typing
from typing import Any

from greenroom import __version__
from greenroom.domain import Session, SessionSummary

from . import _openapi_runs as runs
from ._ops import OPERATIONS, Operation
from ._params import Param, path_param
from ._schedule_endpoints import schedule_schema
from ._schema import JSON, SchemaBuilder

_ERROR_TEXT = {
    400: "Invalid request: the body names the field path (`$.messages[0].role`, `query.since`)",
    401: "Missing or wrong bearer token",
    403: "Cross-site request: the Origin is neither this server nor a --cors-origin",
    404: "Unknown session, message, agent, schedule or route",
    405: "Method not allowed (the Allow header lists the allowed ones)",
    409: "Session busy, or not running, or nothing pending to answer",
    413: "Request body larger than 1 MiB",
    415: "Request body is not declared as JSON (Content-Type: application/json)",
    421: "The Host header names a host this server does not answer to (--allowed-host); or, "
    "in a cluster, a request another node forwarded (Greenroom-Hop) reached a node that does "
    "not own the session: `owned_elsewhere` with `owner`",
    422: "Model switching not supported by this runtime",
    429: "Queue full, or too many open requests from this client address; retry after "
    "Retry-After seconds",
    500: "Internal or store error",
    502: "Agent source or model unavailable",
    503: "Not ready, shutting down, timed out waiting, or the session's actor stopped mid-call; "
    "in a cluster: `owner_unavailable` (the owning node does not answer; Retry-After: its "
    "lease's remaining seconds), `node_fenced` (this node lost its lease and is rejoining) or "
    "`database_unavailable`",
}
_ALSO_TEXT = {202: "Accepted: done, but what it waits for is still in progress"}
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def statuses(op: Operation) -> set[int]:
    """Every status ``op`` can answer besides its success (the edge's included)."""
    out = set(op.errors) | {405, 429}  # wrong method; too many open requests per client
    if not op.public:
        out |= {421, 500}  # Host check; a store or internal failure
        if op.bearer:
            out.add(401)
    if op.method in UNSAFE:
        out.add(403)  # Origin check
    if op.body is not None:
        out |= {400, 413, 415}
    if op.params or op.query or op.header_params:
        out.add(400)
    if "session_id" in op.params:
        out |= {404, 503}  # unknown session; its actor stopped mid-call
    return out


def _errors(*codes: int) -> JSON:
    """Error responses (the Error schema) for ``codes``; 429 carries Retry-After."""
    out: JSON = {}
    for status in codes:
        out[str(status)] = {
            "description": _ERROR_TEXT.get(status, "Error"),
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
    for retried in ("429", "503"):
        if retried in out:
            out[retried]["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
    if "401" in out:
        out["401"]["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
    return out


def _error_schema() -> JSON:
    return {
        "type": "object",
        "properties": {
            "message": {"type": "string"},
            "code": {"type": "string"},
            "path": {"type": "string"},
        },
        "required": ["message", "code"],
    }


def _success(op: Operation, builder: SchemaBuilder) -> JSON:
    if op.stream:
        out: JSON = {
            "description": "Server-Sent Events: `id: <seq>` (when sequenced) and "
            "`data: <Event JSON>` frames",
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "x-event-schema": builder.events(),
                }
            },
        }
        if op.stream == "run":  # a run: its id, and JSON instead with wait=true (issue 25)
            runs.components(builder.components)
            out["headers"] = runs.RUN_ID_HEADERS
            out["content"]["application/json"] = runs.wait_answer()
            out["description"] += "; with wait=true, the run's record and final message"
        return out
    run_schema = runs.success_schema(op.name)
    if run_schema is not None:
        runs.components(builder.components)
        return {"description": op.summary, "content": {"application/json": {"schema": run_schema}}}
    schemas = {
        "create": builder.of(Session),
        "list": _session_list(builder),
        "get": builder.ref("SessionResponse", _session_response(builder)),
        "fork": builder.ref("SessionResponse", _session_response(builder)),
    }
    if op.name.startswith("schedule_"):  # scheduled runs (decision 0028)
        one = builder.ref("Schedule", schedule_schema())
        schemas[op.name] = {"type": "array", "items": one} if op.name == "schedule_list" else one
    schema = schemas.get(op.name, {})
    return {"description": op.summary, "content": {"application/json": {"schema": schema}}}


def _session_list(builder: SchemaBuilder) -> JSON:
    """Without search parameters every root session (docker-agent's array); with any, one
    page (decision 0026)."""
    summaries = {"type": "array", "items": builder.of(SessionSummary)}
    page = {
        "type": "object",
        "properties": {
            "sessions": summaries,
            "next_cursor": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["sessions", "next_cursor"],
    }
    return {"oneOf": [summaries, page]}


def _session_response(builder: SchemaBuilder) -> JSON:
    from greenroom.domain import Message, Permissions

    return {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "title": {"type": "string"},
            "messages": {"type": "array", "items": builder.of(Message)},
            "created_at": {"type": "string", "format": "date-time"},
            "tools_approved": {"type": "boolean"},
            "safety_policy": {"type": "string"},
            "input_tokens": {"type": "integer"},
            "output_tokens": {"type": "integer"},
            "working_dir": {"type": "string"},
            "permissions": {"anyOf": [builder.of(Permissions), {"type": "null"}]},
            "thinking": {"type": "boolean"},
            "hide_tool_results": {"type": "boolean"},
            "agent_file": {"type": "string"},
            "agent_name": {"type": "string"},
        },
        "required": ["id", "title", "created_at"],
    }


def _operation(op: Operation, builder: SchemaBuilder) -> JSON:
    parameters: list[JSON] = [
        {"name": name, "in": "path", "required": True, "schema": path_param(name).schema}
        for name in op.params
    ]
    parameters += [_param(p, "query") for p in op.query]
    parameters += [_param(p, "header") for p in op.header_params]
    responses: JSON = {str(op.success): _success(op, builder)}
    for status in op.also:
        responses[str(status)] = {
            "description": _ALSO_TEXT[status],
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    responses.update(_errors(*sorted(statuses(op))))
    if op.name in LINKS:
        responses[str(op.success)]["links"] = LINKS[op.name]
    out: JSON = {
        "operationId": op.name,
        "summary": op.summary,
        "parameters": parameters,
        "responses": responses,
        "x-websocket-op": op.name if op.websocket else None,
    }
    if op.public or not op.bearer:
        out["security"] = []
    if op.body is not None:
        schema = builder.of(op.body)
        if op.array_body is not None:  # older clients send the array alone
            field = typing.get_type_hints(op.body, include_extras=True)[op.array_body]
            schema = {"oneOf": [schema, builder.of(field)]}
        out["requestBody"] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": schema}},
        }
    return out


def _session_link(operation_id: str, **extra: str) -> JSON:
    return {
        "operationId": operation_id,
        "parameters": {"session_id": "$response.body#/id", **extra},
    }


# OpenAPI links: what a client can do with a created session (and what stateful fuzzing follows).
_ON_SESSION = {
    name: _session_link(name)
    for name in (
        "get",
        "snapshot",
        "delete",
        "add_message",
        "set_title",
        "set_tokens",
        "set_starred",
        "set_permissions",
        "set_safety_policy",
        "fork",
        "run",
        "recovery",
    )
}
LINKS: dict[str, JSON] = {"create": _ON_SESSION, "fork": _ON_SESSION}


def _param(param: Param, where: str) -> JSON:
    out: JSON = {
        "name": param.name,
        "in": where,
        "required": param.required,
        "schema": param.schema,
    }
    if param.description:
        out["description"] = param.description
    return out


def build_openapi(*, secured: bool = True) -> dict[str, Any]:
    builder = SchemaBuilder()
    builder.components["Error"] = _error_schema()
    paths: dict[str, JSON] = {}
    for op in OPERATIONS:
        if op.rest:
            paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, builder)
    paths["/api/ws"] = {
        "get": {
            "operationId": "websocket",
            "summary": "WebSocket API: every operation above as an op, plus subscriptions "
            "(see docs/websocket.md)",
            "responses": {
                "101": {"description": "Switching Protocols"},
                **_errors(401, 403, 405, 421, 429),
            },
        }
    }
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1 document",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                **_errors(401, 405, 421, 429),
            },
        }
    }
    paths["/metrics"] = {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics, text format (docs/observability.md); takes the "
            "server's token or --metrics-token, open when the server has neither",
            "responses": {
                "200": {
                    "description": "Every metric of this server",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **_errors(401, 405, 421, 429),
            },
        }
    }
    html = {"text/html": {"schema": {"type": "string"}}}
    paths["/"] = {
        "get": {
            "operationId": "chat_page",
            "summary": "The chat page (no token needed to load it)",
            "security": [],
            "responses": {"200": {"description": "The page", "content": html}},
        }
    }
    paths["/ui/{name}"] = {
        "get": {
            "operationId": "chat_page_file",
            "summary": "A file of the chat page (script, style sheet)",
            "security": [],
            "parameters": [
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "responses": {
                "200": {
                    "description": "The file",
                    "content": {
                        "text/javascript": {"schema": {"type": "string"}},
                        "text/css": {"schema": {"type": "string"}},
                        **html,
                    },
                },
                "404": {
                    "description": "No such file",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                },
            },
        }
    }
    builder.events()
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "greenroom",
            "version": __version__,
            "description": "Agent session server, compatible with docker-agent's HTTP API.",
        },
        "paths": paths,
        "components": {"schemas": builder.components},
    }
    document["components"]["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "greenroom serve --auth-token (WebSocket: subprotocol bearer.<token>)",
        }
    }
    if secured:
        document["security"] = [{"bearer": []}]
    return document
