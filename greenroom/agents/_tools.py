"""Tools an agent can call: the façade over the ``tools`` package.

:data:`TOOLSET_BUILDERS` is the one table from a toolset ``type`` to its builder; a type is
supported exactly when it has an entry (``greenroom validate`` and the runtime's warnings read
it). The toolsets themselves live in ``greenroom/agents/tools/``.
"""

from .tools import (
    TOOLSET_BUILDERS as TOOLSET_BUILDERS,
    AgentTools as AgentTools,
    FunctionTool as FunctionTool,
    McpSettings as McpSettings,
    Tool as Tool,
    ToolAnnotations as ToolAnnotations,
    ToolContext as ToolContext,
    ToolHost as ToolHost,
    ToolResult as ToolResult,
    ToolsetBuilder as ToolsetBuilder,
    ToolsFor as ToolsFor,
    build_tools as build_tools,
    default_tools_for as default_tools_for,
    tool_definition as tool_definition,
)
