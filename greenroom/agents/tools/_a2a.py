"""The ``a2a`` toolset: a remote agent spoken to over the A2A protocol, as docker-agent does.

Options: ``url`` (the remote agent's base URL), ``name`` (a tool-name prefix) and ``headers``
(``${env.X}`` expanded). Before the next model call the agent card is read
(``<url>/.well-known/agent-card.json``, else the older ``agent.json``); each of the card's
skills becomes a tool (one tool named after the agent when it lists none), named
``<name>_<skill id>`` in lower case with anything but letters, digits and ``_`` replaced, taking
one argument ``message``. A call sends the message to the card's endpoint (JSON-RPC
``message/stream``, server-sent events; ``message/send`` when the card says it does not stream)
and returns the text of every message, status update and artifact it answers with (of a task:
its status message and its artifacts; ``No response from agent`` when there is none). A card
that cannot be read is a toolset warning, and the card is read again before the following model
call; a failed call is a tool error. Calls have the MCP call timeout.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import FunctionTool, ToolAnnotations, ToolContext, ToolResult, ToolsetError, error
from ._expand import expand
from ._registry import Toolset, register

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
CARD_BUDGET = 30.0
NO_RESPONSE = "No response from agent"


def tool_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_")
    return re.sub(r"_+", "_", cleaned).lower()


def texts(event: Any) -> str:
    """The text parts of an A2A event (message, task, status or artifact update)."""
    if not isinstance(event, Mapping):
        return ""
    parts: Any = ()
    kind = event.get("kind")
    if kind == "message":
        parts = event.get("parts")
    elif kind in ("task", "status-update"):
        message = (event.get("status") or {}).get("message")
        parts = message.get("parts") if isinstance(message, Mapping) else ()
        if kind == "task":  # a finished task (message/send) carries its answer as artifacts
            artifacts = [a for a in event.get("artifacts") or () if isinstance(a, Mapping)]
            parts = [*(parts or ()), *(p for a in artifacts for p in a.get("parts") or ())]
    elif kind == "artifact-update":
        artifact = event.get("artifact")
        parts = artifact.get("parts") if isinstance(artifact, Mapping) else ()
    return "".join(
        str(p.get("text", ""))
        for p in parts or ()
        if isinstance(p, Mapping) and p.get("kind", "text") == "text"
    )


async def read_card(client: httpx.AsyncClient, url: str) -> Mapping[str, Any]:
    problems = []
    for path in CARD_PATHS:
        target = url.rstrip("/") + path
        try:
            response = await client.get(target)
        except httpx.HTTPError as exc:
            raise ToolsetError(f"failed to fetch A2A agent card: {exc}") from None
        if response.status_code == 200:
            try:
                card = response.json()
            except ValueError:
                raise ToolsetError(f"the A2A agent card at {target} is not JSON") from None
            if isinstance(card, Mapping):
                return card
        problems.append(f"{target}: {response.status_code}")
    raise ToolsetError("failed to fetch A2A agent card: " + "; ".join(problems))


def _request(method: str, message: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": str(uuid.uuid4()),
        "method": method,
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": message}],
            }
        },
    }


def _result(frame: Any) -> Any:
    if not isinstance(frame, Mapping):
        raise ValueError("not a JSON-RPC response")
    if frame.get("error") is not None:
        problem = frame["error"]
        text = problem.get("message") if isinstance(problem, Mapping) else problem
        raise ValueError(f"A2A call failed: {text}")
    return frame.get("result")


class RemoteAgent:
    def __init__(self, url: str, headers: Mapping[str, str], timeout: float) -> None:
        self.url = url
        self.headers = dict(headers)
        self.timeout = timeout
        self.endpoint = url
        self.streaming = True

    async def send(self, message: str) -> ToolResult:
        method = "message/stream" if self.streaming else "message/send"
        body = _request(method, message)
        out: list[str] = []
        try:
            with trio.fail_after(self.timeout):
                async with httpx.AsyncClient(headers=self.headers, timeout=None) as client:
                    if not self.streaming:
                        response = await client.post(self.endpoint, json=body)
                        response.raise_for_status()
                        out.append(texts(_result(response.json())))
                    else:
                        async with client.stream("POST", self.endpoint, json=body) as response:
                            response.raise_for_status()
                            async for line in response.aiter_lines():
                                if line.startswith("data:"):
                                    out.append(texts(_result(json.loads(line[5:]))))
        except trio.TooSlowError:
            return error(f"A2A call failed: no answer within {self.timeout:g} seconds")
        except (httpx.HTTPError, ValueError) as exc:
            text = str(exc)
            return error(text if text.startswith("A2A call failed") else f"A2A call failed: {text}")
        return ToolResult("".join(out) or NO_RESPONSE)


@register("a2a")
def a2a_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    url = config.options.get("url")
    if not isinstance(url, str) or not url:
        raise ToolsetError("url is required")
    env = {"env": dict(ctx.env)}
    raw = config.options.get("headers") or {}
    headers = (
        {str(k): expand(str(v), env) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    )
    prefix = str(config.options.get("name") or "")
    agent = RemoteAgent(expand(url, env), headers, ctx.mcp.call_timeout)

    async def start() -> Toolset:
        with trio.move_on_after(CARD_BUDGET) as scope:
            async with httpx.AsyncClient(headers=headers, follow_redirects=True) as client:
                card = await read_card(client, agent.url)
        if scope.cancelled_caught:
            raise ToolsetError(f"failed to fetch A2A agent card: no answer in {CARD_BUDGET:g}s")
        endpoint = card.get("url")
        agent.endpoint = endpoint if isinstance(endpoint, str) and endpoint else agent.url
        capabilities = card.get("capabilities")
        if isinstance(capabilities, Mapping) and capabilities.get("streaming") is False:
            agent.streaming = False
        agent_name = str(card.get("name") or "agent")
        description = str(card.get("description") or "")
        skills = [s for s in card.get("skills") or [] if isinstance(s, Mapping)]
        if not skills:
            skills = [{"id": agent_name, "name": agent_name, "description": description}]
        tools = []
        for skill in skills:
            skill_name = str(skill.get("name") or skill.get("id") or agent_name)
            name = str(skill.get("id") or skill_name)
            name = tool_name(f"{prefix}_{name}" if prefix else name)
            about = str(skill.get("description") or "")
            spec = ToolSpec(
                name,
                f"Calls the '{skill_name}' skill of the {agent_name} agent. {about}",
                {
                    "type": "object",
                    "properties": {
                        "message": {
                            "type": "string",
                            "description": "The message or request to send to the agent",
                        }
                    },
                    "required": ["message"],
                },
            )

            async def call(arguments: Mapping[str, Any]) -> ToolResult:
                return await agent.send(str(arguments.get("message", "")))

            tools.append(FunctionTool(spec, call, ToolAnnotations(title=name), "a2a"))
        lines = [f"## {agent_name}", "", description]
        lines += [f"- **{s.get('name', '')}**: {s.get('description', '')}" for s in skills]
        return Toolset(list(tools), "\n".join(lines))

    return Toolset([], start=start)
