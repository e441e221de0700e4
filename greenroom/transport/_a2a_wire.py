"""The A2A protocol's wire shapes (A2A 0.3, JSON-RPC 2.0 binding), as pure functions: reading a
request and its message, the error codes, and the task, message, event and agent-card objects
``greenroom serve a2a`` answers with (decision 0035). No I/O here."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

import attrs

PROTOCOL_VERSION = "0.3.0"
INVOKE_PATH = "/invoke"
CARD_PATH = "/.well-known/agent-card.json"

# JSON-RPC 2.0's codes, then A2A's own (A2A 0.3, section 8).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
CONTEXT_BUSY = -32000  # greenroom's: a turn of this context runs (implementation-defined range)

TERMINAL = frozenset({"completed", "canceled", "failed", "rejected"})
_CONTEXT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class RpcError(Exception):
    """A JSON-RPC error answer: its code, message and optional data."""

    def __init__(self, code: int, message: str, data: Any = None, request_id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.request_id = request_id  # the id of a request that could be read this far

    def body(self, request_id: Any) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"jsonrpc": "2.0", "id": request_id, "error": error}


@attrs.frozen
class RpcRequest:
    id: Any
    method: str
    params: Mapping[str, Any]


@attrs.frozen
class Incoming:
    """A ``message/send`` or ``message/stream`` request's message, checked."""

    text: str
    message: Mapping[str, Any]  # as sent, kept in the task's history
    context_id: str  # "" : a new context
    task_id: str  # "" : a new task
    blocking: bool = True


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def new_id() -> str:
    return str(uuid.uuid4())


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def parse_request(data: bytes) -> RpcRequest:
    """The JSON-RPC request in ``data``; RpcError -32700 (not JSON) or -32600 (not a request).
    A batch (a JSON array) is not supported: -32600."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise RpcError(PARSE_ERROR, "Parse error: the body is not JSON") from None
    if not isinstance(body, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC request object")
    request_id = body.get("id")
    if request_id is not None and (
        isinstance(request_id, bool) or not isinstance(request_id, str | int)
    ):
        raise RpcError(INVALID_REQUEST, "Invalid Request: $.id must be a string or a number")
    if body.get("jsonrpc") != "2.0":
        raise _invalid(request_id, 'Invalid Request: $.jsonrpc must be "2.0"')
    method = body.get("method")
    if not isinstance(method, str) or not method:
        raise _invalid(request_id, "Invalid Request: $.method must be a string")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise _invalid(request_id, "Invalid Request: $.params must be an object")
    return RpcRequest(request_id, method, params)


def _invalid(request_id: Any, message: str) -> RpcError:
    return RpcError(INVALID_REQUEST, message, request_id=request_id)


def params_error(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"Invalid params: {message}")


def read_message(params: Mapping[str, Any]) -> Incoming:
    """The message of ``message/send`` / ``message/stream`` params (``$.params.message``)."""
    message = params.get("message")
    if not isinstance(message, dict):
        raise params_error("$.params.message must be an object")
    if message.get("role") != "user":
        raise params_error('$.params.message.role must be "user"')
    if not isinstance(message.get("messageId"), str) or not message["messageId"]:
        raise params_error("$.params.message.messageId must be a string")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise params_error("$.params.message.parts must be a non-empty list")
    texts = [_part_text(part, i) for i, part in enumerate(parts)]
    text = "\n".join(t for t in texts if t)
    if not text.strip():
        raise params_error("$.params.message has no text")
    context_id = message.get("contextId") or ""
    if not isinstance(context_id, str) or (context_id and not _CONTEXT_ID.match(context_id)):
        raise params_error(
            "$.params.message.contextId must be 1 to 128 letters, digits or ._:- characters"
        )
    task_id = message.get("taskId") or ""
    if not isinstance(task_id, str):
        raise params_error("$.params.message.taskId must be a string")
    configuration = params.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise params_error("$.params.configuration must be an object")
    if configuration.get("pushNotificationConfig"):
        raise RpcError(PUSH_NOT_SUPPORTED, "Push Notification is not supported")
    blocking = configuration.get("blocking", True)
    return Incoming(text, message, context_id, task_id, blocking is not False)


def _part_text(part: Any, index: int) -> str:
    where = f"$.params.message.parts[{index}]"
    if not isinstance(part, dict):
        raise params_error(f"{where} must be an object")
    kind = part.get("kind", "text")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise params_error(f"{where}.text must be a string")
        return str(part["text"])
    if kind == "data":
        return json.dumps(part.get("data"), ensure_ascii=False)
    raise RpcError(
        CONTENT_TYPE_NOT_SUPPORTED,
        f"Incompatible content types: {where} is a {kind!r} part; this agent takes text and data",
    )


def task_id_param(params: Mapping[str, Any]) -> str:
    task_id = params.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise params_error("$.params.id must be a task id")
    return task_id


def text_parts(text: str) -> list[dict[str, Any]]:
    return [{"kind": "text", "text": text}]


def agent_message(text: str, context_id: str, task_id: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "agent",
        "messageId": new_id(),
        "parts": text_parts(text),
        "contextId": context_id,
        "taskId": task_id,
    }


def status(state: str, message: Mapping[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"state": state, "timestamp": now()}
    if message is not None:
        found["message"] = dict(message)
    return found


def status_update(
    task_id: str, context_id: str, state_: Mapping[str, Any], final: bool
) -> dict[str, Any]:
    return {
        "kind": "status-update",
        "taskId": task_id,
        "contextId": context_id,
        "status": dict(state_),
        "final": final,
    }


def artifact_update(
    task_id: str, context_id: str, artifact_id: str, text: str, *, append: bool, last: bool
) -> dict[str, Any]:
    return {
        "kind": "artifact-update",
        "taskId": task_id,
        "contextId": context_id,
        "artifact": {"artifactId": artifact_id, "name": "response", "parts": text_parts(text)},
        "append": append,
        "lastChunk": last,
    }


@attrs.frozen
class CardInfo:
    """What the agent card says of the agent served."""

    name: str  # the agent file's name without its extension (as docker-agent names it)
    agent_name: str  # the agent in it that answers
    description: str
    url: str  # the JSON-RPC endpoint
    version: str
    bearer: bool = False  # calls need Authorization: Bearer


def agent_card(info: CardInfo) -> dict[str, Any]:
    description = info.description or f"Agent {info.agent_name}"
    card: dict[str, Any] = {
        "protocolVersion": PROTOCOL_VERSION,
        "name": info.name,
        "description": description,
        "url": info.url,
        "preferredTransport": "JSONRPC",
        "version": info.version,
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "stateTransitionHistory": False,
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {
                "id": f"{info.name}_{info.agent_name}",
                "name": info.agent_name,
                "description": description,
                "tags": ["llm", "greenroom"],
            }
        ],
    }
    if info.bearer:
        card["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        card["security"] = [{"bearer": []}]
    return card
