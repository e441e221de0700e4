"""Built-in toolsets: one module per toolset type, each registered in ``TOOLSET_BUILDERS``.

The table knows every type's module (``_registry.BUILDER_MODULES``) and imports a module the
first time its type is looked up. The ``mcp`` builder lives with the MCP client
(``agents/mcp``); ``background_agents`` lives beside the runtime
(``agents/_background_tools.py``).
"""

from ._base import (
    OUTPUT_LIMIT as OUTPUT_LIMIT,
    FunctionTool as FunctionTool,
    Image as Image,
    McpSettings as McpSettings,
    ProcessLedger as ProcessLedger,
    ServicesUnavailable as ServicesUnavailable,
    Tool as Tool,
    ToolAnnotations as ToolAnnotations,
    ToolContext as ToolContext,
    ToolHost as ToolHost,
    ToolResult as ToolResult,
    ToolsetError as ToolsetError,
    command_of as command_of,
    limit_output as limit_output,
    tool_definition as tool_definition,
)
from ._egress_policy import (
    EgressPolicy as EgressPolicy,
    parse_networks as parse_networks,
)
from ._process import (
    kill_recorded_group as kill_recorded_group,
    start_ticks as start_ticks,
)
from ._registry import (
    TOOLSET_BUILDERS as TOOLSET_BUILDERS,
    AgentTools as AgentTools,
    Toolset as Toolset,
    ToolsetBuilder as ToolsetBuilder,
    ToolsFor as ToolsFor,
    build_tools as build_tools,
    default_tools_for as default_tools_for,
)
