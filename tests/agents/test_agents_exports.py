"""The public names of greenroom.agents (agent files, sources, the loop) and of its providers
package stay exported."""

from __future__ import annotations

import ast
from pathlib import Path

import greenroom.agents
import greenroom.agents.providers

EXPECTED = {
    "AUTO_MODEL",
    "DEFAULT_SOURCE_KEY",
    "INTERRUPTED_NOTE",
    "TOOLSET_BUILDERS",
    "AgentConfig",
    "AgentEntry",
    "AgentFile",
    "AgentSources",
    "AgentTools",
    "Decision",
    "ElicitationAnswer",
    "FunctionTool",
    "LocalRuntime",
    "LocalRuntimeFactory",
    "ModelTitleGenerator",
    "Tool",
    "ToolResult",
    "ToolsetConfig",
    "agent_file_to_json",
    "build_tools",
    "bundled_agent_path",
    "decide",
    "default_tools_for",
    "expand_command",
    "load_agent_file",
    "parse_agent_file",
    "parse_slash_command",
    "resolve_agent_switch",
    "sanitize_title",
    "validate_files",
    "validate_main",
}


def test_agent_names_are_exported() -> None:
    public = {name for name in dir(greenroom.agents) if not name.startswith("_")}
    assert public >= EXPECTED


PROVIDER_NAMES = {
    "KEYLESS_PLACEHOLDER",
    "PROVIDERS",
    "AnthropicProvider",
    "Backoff",
    "BedrockProvider",
    "ClientStatistics",
    "Delta",
    "EchoProvider",
    "GoogleProvider",
    "ModelClients",
    "ModelConfig",
    "ModelRequest",
    "ModelResponse",
    "OnDelta",
    "OpenAIProvider",
    "Provider",
    "ReasoningDelta",
    "Script",
    "ScriptedProvider",
    "StructuredOutput",
    "TextDelta",
    "ToolSpec",
    "make_provider",
    "open_model_clients",
    "parse_script",
    "resolve_auto",
    "script_from_data",
}


def test_provider_names_are_exported() -> None:
    public = {name for name in dir(greenroom.agents.providers) if not name.startswith("_")}
    assert public == PROVIDER_NAMES


def test_the_provider_modules_are_private() -> None:
    root = Path(greenroom.agents.providers.__file__).parent
    public = [p.name for p in root.glob("*.py") if not p.name.startswith("_")]
    assert public == []


def test_the_agents_package_stays_below_actors_transport_and_persistence() -> None:
    root = Path(greenroom.agents.__file__).parent
    forbidden = ("greenroom.persistence", "greenroom.actors", "greenroom.transport")
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bad = [n for n in names if n.startswith(forbidden)]
            assert not bad, f"{path} imports {bad}"
