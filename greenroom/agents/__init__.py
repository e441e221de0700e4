"""Agents: the Runtime contract, agent files, model providers and the agent loop."""

from ._commands import (
    expand_command as expand_command,
    parse_slash_command as parse_slash_command,
    resolve_agent_switch as resolve_agent_switch,
)
from ._config import (
    AUTO_MODEL as AUTO_MODEL,
    AgentConfig as AgentConfig,
    AgentFile as AgentFile,
    ToolsetConfig as ToolsetConfig,
    agent_file_to_json as agent_file_to_json,
)
from ._confirm import check_grant as check_grant
from ._elicitation import (
    ElicitationAnswer as ElicitationAnswer,
)
from ._factory import (
    LocalRuntimeFactory as LocalRuntimeFactory,
)
from ._local import (
    INTERRUPTED_NOTE as INTERRUPTED_NOTE,
    LocalRuntime as LocalRuntime,
)
from ._oauth_flows import (
    OAuthFlows as OAuthFlows,
    Redirect as Redirect,
)
from ._permissions import (
    Decision as Decision,
    decide as decide,
    decide_command as decide_command,
)
from ._runtime import (
    BuiltRuntime as BuiltRuntime,
    Command as Command,
    ConfirmationKind as ConfirmationKind,
    CurrentAgent as CurrentAgent,
    ElicitationSink as ElicitationSink,
    ModelChoice as ModelChoice,
    PricedTitle as PricedTitle,
    QueuedMessage as QueuedMessage,
    QueueStatus as QueueStatus,
    RecallHandler as RecallHandler,
    ResumeRequest as ResumeRequest,
    Runtime as Runtime,
    RuntimeFactory as RuntimeFactory,
    SupportsBusy as SupportsBusy,
    SupportsCompact as SupportsCompact,
    SupportsPricedTitles as SupportsPricedTitles,
    SupportsRecall as SupportsRecall,
    SupportsServe as SupportsServe,
    SupportsToolRerun as SupportsToolRerun,
    TitleGenerator as TitleGenerator,
    TurnIO as TurnIO,
    is_busy as is_busy,
    mirrors_elicitation as mirrors_elicitation,
    supports_compact as supports_compact,
    supports_priced_titles as supports_priced_titles,
    supports_recall as supports_recall,
    supports_serve as supports_serve,
    supports_tool_rerun as supports_tool_rerun,
)
from ._sources import (
    DEFAULT_SOURCE_KEY as DEFAULT_SOURCE_KEY,
    AgentEntry as AgentEntry,
    AgentSources as AgentSources,
    bundled_agent_path as bundled_agent_path,
)
from ._titles import (
    ModelTitleGenerator as ModelTitleGenerator,
    sanitize_title as sanitize_title,
)
from ._validate import (
    validate_files as validate_files,
    validate_main as validate_main,
)
from ._yaml import (
    load_agent_file as load_agent_file,
    parse_agent_file as parse_agent_file,
)
from .tools import (
    TOOLSET_BUILDERS as TOOLSET_BUILDERS,
    AgentTools as AgentTools,
    FunctionTool as FunctionTool,
    McpSettings as McpSettings,
    Tool as Tool,
    ToolAnnotations as ToolAnnotations,
    ToolContext as ToolContext,
    ToolResult as ToolResult,
    build_tools as build_tools,
    default_tools_for as default_tools_for,
)
