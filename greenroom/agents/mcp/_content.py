"""MCP values in greenroom's terms: a server's tool as a :class:`Tool`, a call's result as a
:class:`ToolResult` (spec §5.3)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import mcp_types

from ..providers._base import ToolSpec
from ..tools._base import Image, ToolAnnotations, ToolResult

NO_OUTPUT = "no output"


def annotations_of(tool: mcp_types.Tool) -> ToolAnnotations:
    """The server's annotations, copied (so approval follows its ``readOnlyHint``)."""
    hints = tool.annotations
    title = tool.title or (hints.title if hints is not None else None) or ""
    if hints is None:
        return ToolAnnotations(title=title)
    return ToolAnnotations(
        title=title,
        read_only=bool(hints.read_only_hint),
        destructive=hints.destructive_hint,
        idempotent=bool(hints.idempotent_hint),
        open_world=hints.open_world_hint,
    )


def parameters_of(tool: mcp_types.Tool) -> dict[str, Any]:
    """The tool's input schema, normalised as for every tool (an object with properties)."""
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    if not isinstance(schema.get("properties"), Mapping):
        schema["properties"] = {}
    if schema.get("required") is None:
        schema.pop("required", None)
    return schema


Caller = Callable[[str, Mapping[str, Any]], Awaitable[ToolResult]]


@attrs.frozen
class McpTool:
    """One tool of an MCP server; ``remote_name`` is the server's name for it (the prefix of
    a ``name:`` option is not sent to the server)."""

    spec: ToolSpec
    remote_name: str
    caller: Caller
    annotations: ToolAnnotations = attrs.field(factory=ToolAnnotations)
    category: str = ""

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        return await self.caller(self.remote_name, arguments)


def tool_of(tool: mcp_types.Tool, prefix: str, caller: Caller) -> McpTool:
    name = f"{prefix}_{tool.name}" if prefix else tool.name
    spec = ToolSpec(name, tool.description or "", parameters_of(tool))
    return McpTool(spec, tool.name, caller, annotations_of(tool))


def _link(resource: mcp_types.ResourceLink) -> str:
    uri = str(resource.uri).replace(")", "%29")
    if not resource.name:
        return uri
    return f"[{resource.name.replace(']', chr(92) + ']')}]({uri})"


def result_of(result: mcp_types.CallToolResult) -> ToolResult:
    """Text contents concatenated; images attached; resource links as Markdown links;
    embedded resources and audio left out; no content at all → ``no output``."""
    texts: list[str] = []
    images: list[Image] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            images.append(Image(block.data, block.mime_type))
        elif isinstance(block, mcp_types.ResourceLink):
            texts.append(_link(block))
    output = "".join(texts)
    if not output and not images:
        output = NO_OUTPUT
    meta = result.structured_content if result.structured_content is not None else None
    return ToolResult(output, is_error=bool(result.is_error), meta=meta, images=tuple(images))
