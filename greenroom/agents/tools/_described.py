"""``add_description_parameter``: a ``description`` argument on the tools docker-agent marks.

docker-agent marks ``shell``, the four background-job tools and the filesystem's
``edit_file``, ``list_directory``, ``search_files_content`` and ``write_file``; with the agent
key set, each of those gets an optional string property ``description`` (what this call is
doing, for people watching), which the tool itself never sees: it is taken out of the
arguments before the call. Other tools are left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..providers._base import ToolSpec
from ._base import Tool, ToolAnnotations, ToolResult

DESCRIPTION_PARAM = "description"
DESCRIBED_TOOLS = frozenset(
    {
        "shell",
        "run_background_job",
        "list_background_jobs",
        "view_background_job",
        "stop_background_job",
        "edit_file",
        "list_directory",
        "search_files_content",
        "write_file",
    }
)
_PROPERTY = {
    "type": "string",
    "description": "A brief, human-readable description of what this tool call is doing",
}


@attrs.frozen
class DescribedTool:
    """``inner`` with the ``description`` parameter added to its schema."""

    inner: Tool

    @property
    def spec(self) -> ToolSpec:
        spec = self.inner.spec
        parameters = dict(spec.parameters)
        properties = dict(parameters.get("properties") or {})
        properties[DESCRIPTION_PARAM] = dict(_PROPERTY)
        parameters["properties"] = properties
        return ToolSpec(spec.name, spec.description, parameters)

    @property
    def annotations(self) -> ToolAnnotations:
        return self.inner.annotations

    @property
    def category(self) -> str:
        return self.inner.category

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        kept = {k: v for k, v in arguments.items() if k != DESCRIPTION_PARAM}
        return await self.inner.call(kept)


def described(tool: Tool) -> Tool:
    """``tool`` with the description parameter when upstream marks it, else itself."""
    if tool.spec.name not in DESCRIBED_TOOLS or isinstance(tool, DescribedTool):
        return tool
    return DescribedTool(tool)
