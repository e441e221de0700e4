"""Code mode: an agent's tools offered as JavaScript functions of one tool (decision 0032).

With ``code_mode_tools: true`` the model is offered ``run_tools_with_javascript`` instead of
the agent's tools: its ``script`` argument is the body of a JavaScript function in which each
tool is a synchronous function taking one arguments object and returning the tool's text
output (throwing an ``Error`` with the error text when the tool fails). The tool's description
lists every wrapped tool with its description and JSON schema. Tools of category ``todo``
(as docker-agent) and the tools the runtime runs with the caller's frame (delegation and
background agents: ``transfer_task``, ``handoff``, ...) stay ordinary tools beside it.

Unlike docker-agent, every call a script makes goes through the approval path of the model's
own calls (:meth:`ToolCalls.run_for_script`): hooks, deny rules, permissions, a
``tool_call_confirmation`` question when one is due, the audit. The script's calls are events
of the session (``tool_call``, ``tool_call_response``, each with a fresh id) but not messages
of its history: the model sees only the result of ``run_tools_with_javascript``, a JSON object
``{value, stdout, stderr}`` plus ``tool_calls`` (name, arguments, result or error) when the
script failed.

The wrapped tools are read when the tool is rebuilt (``AgentTools`` does it when its toolsets
change, an MCP server's tools appearing included), so a script always sees the tools the
description lists.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from greenroom.domain import FunctionCall, ToolCall

from ._frame import Frame, FrameTool, ManagedTool
from ._js_sandbox import Limits, run_script
from ._toolcalls import ToolCalls
from .providers._base import ToolSpec
from .tools import Tool, ToolResult
from .tools._base import ProcessLedger, ToolAnnotations, error

NAME = "run_tools_with_javascript"
CATEGORY = "code mode"
# Read-only: the script itself changes nothing; each of its calls is checked on its own.
ANNOTATIONS = ToolAnnotations(title="Run tools with JavaScript", read_only=True)

_INTRO = """\
Run a JavaScript script that calls the tools listed below.

Instead of calling the tools one by one, write one script that calls as many of them as the \
task needs, decides what to do next from their results and combines what they return.

How the script runs:
- The script is the body of a function: end it with `return <value>`; a string is returned \
as it is, any other value as JSON.
- Each tool is a plain synchronous function: no `await`, no `async`. It takes one object \
with the tool's arguments and returns the tool's output as a string; when the tool fails it \
throws an Error whose message is the tool's error (catch it with try/catch).
- A call may need the user's approval, like any tool call; a rejected call throws.
- `console.log` (and `info`, `debug`, `trace`, `warn`) write to stdout, `console.error` to \
stderr; both are returned with the value.
- There is no file, network or process access other than through these tools, and the \
script's time and memory are limited.
- A tool whose name is not a JavaScript identifier is called as `globalThis["its-name"](...)`.

Available tools/functions:
"""


def kept_out(tool: Tool) -> bool:
    """Whether ``tool`` stays an ordinary tool beside the code-mode tool."""
    return tool.category == "todo" or isinstance(tool, ManagedTool)


def _doc(tool: Tool) -> str:
    spec = tool.spec
    lines = ["", "/**"]
    lines += [f" * {line.strip()}".rstrip() for line in spec.description.splitlines()]
    schema = json.dumps(dict(spec.parameters), indent=2, sort_keys=True, default=str)
    lines += [
        " *",
        " * @param args - an object with the arguments, following this JSON schema:",
        *(f" * {line}" for line in schema.splitlines()),
        " * @returns the tool's output, as a string",
        " */",
        f"function {spec.name}(args: object): string {{ ... }}",
    ]
    return "\n".join(lines)


def description(wrapped: Mapping[str, Tool]) -> str:
    return _INTRO + "\n".join(_doc(tool) for tool in wrapped.values())


PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "script": {
            "type": "string",
            "description": "The body of the JavaScript function to run",
        }
    },
    "required": ["script"],
}


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


Offer = Callable[[dict[str, Tool]], dict[str, Tool]]
"""The tools an agent would be offered → what code mode offers (``AgentTools.code_mode``)."""


def code_mode(
    tool_calls: ToolCalls, limits: Limits | None = None, ledger: ProcessLedger | None = None
) -> Offer:
    """What code mode makes of an agent's tools: the code-mode tool (its scripts' calls run
    through ``tool_calls``) followed by the tools kept out of it (:func:`kept_out`)."""
    chosen = limits or Limits()

    def offer(offered: dict[str, Tool]) -> dict[str, Tool]:
        wrapped = {name: tool for name, tool in offered.items() if not kept_out(tool)}
        kept = {name: tool for name, tool in offered.items() if kept_out(tool)}
        return {NAME: make(wrapped), **kept}

    def make(tools: dict[str, Tool]) -> Tool:

        async def run(frame: Frame, arguments: Mapping[str, Any]) -> ToolResult:
            script = arguments.get("script")
            if not isinstance(script, str):
                return error("Error calling tool: invalid arguments: script must be a string")
            calls: list[dict[str, Any]] = []

            async def call_tool(name: str, arguments_text: str) -> tuple[bool, str]:
                call = ToolCall(f"js_{uuid.uuid4().hex[:24]}", FunctionCall(name, arguments_text))
                result = await tool_calls.run_for_script(frame, tools.get(name), call)
                record: dict[str, Any] = {"name": name, "arguments": _arguments(arguments_text)}
                record["error" if result.is_error else "result"] = result.output
                calls.append(record)
                return not result.is_error, result.output

            try:
                outcome = await run_script(script, list(tools), call_tool, chosen, ledger=ledger)
            except OSError as exc:
                return error(f"Error calling tool: the script could not start: {exc}")
            body: dict[str, Any] = {
                "value": outcome.value,
                "stdout": outcome.stdout,
                "stderr": outcome.stderr,
            }
            if outcome.failed:
                body["tool_calls"] = calls
            return ToolResult(json.dumps(body, ensure_ascii=False), is_error=outcome.failed)

        spec = ToolSpec(NAME, description(tools), PARAMETERS)
        return FrameTool(spec, run, ANNOTATIONS, CATEGORY)

    return offer
