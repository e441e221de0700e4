"""``user_prompt``: ask the user a question through the elicitation path (spec §2.11).

The question becomes an ``elicitation_request`` event (on the session's event log and the run
stream); the client answers with ``POST /api/sessions/{id}/elicitation`` or the WebSocket op.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import FunctionTool, ToolAnnotations, ToolContext, ToolResult, error, schema, string
from ._registry import Toolset, register

SPEC = ToolSpec(
    "user_prompt",
    "Ask the user a question and wait for the answer. Give a JSON schema to ask for "
    "structured input (a form); the answer comes back as JSON.",
    schema(
        {
            "message": string("The question or request shown to the user"),
            "title": string("A short title for the prompt"),
            "schema": {"type": "object", "description": "JSON Schema of the expected answer"},
        },
        ("message",),
    ),
)
INSTRUCTIONS = (
    "## Asking the user\n\n"
    "Use user_prompt when you need information or a decision only the user can give. The "
    "answer's action is accept, decline or cancel; only an accepted answer has content."
)


@register("user_prompt")
def user_prompt_toolset(_: ToolsetConfig, ctx: ToolContext) -> Toolset:
    async def user_prompt(args: Mapping[str, Any]) -> ToolResult:
        host = ctx.host
        if host is None:
            return error(
                "user_prompt tool is not available in this context "
                "(no elicitation handler configured)"
            )
        title = args.get("title")
        meta = {"cagent/title": title} if isinstance(title, str) and title else None
        try:
            answer = await host.elicit(str(args["message"]), schema=args.get("schema"), meta=meta)
        except Exception as exc:
            return error(f"Error calling tool: elicitation request failed: {exc}")
        body: dict[str, Any] = {"action": answer.action}
        if answer.content is not None:
            body["content"] = dict(answer.content)
        return ToolResult(json.dumps(body), is_error=answer.action != "accept")

    annotations = ToolAnnotations(title="User Prompt", read_only=True)
    return Toolset([FunctionTool(SPEC, user_prompt, annotations, "user_prompt")], INSTRUCTIONS)
