"""What the entry points import: no vendor SDK, MCP, terminal UI or browser driver until an
agent, a flag or a command needs it (issue 21). Each check runs in a fresh interpreter, so
what another test imported does not count."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "openai",
    "anthropic",
    "google.genai",
    "botocore",
    "boto3",
    "mcp",
    "prompt_toolkit",
    "playwright",
    "httpx",  # only the network tools (fetch, api, openapi, remote skills and MCP) need it
    "quickjs",  # code mode: only ever in a script's child process (decision 0032)
    "opentelemetry.sdk",  # traces: only when turned on (--otel, OTEL_*)
    "a2a",  # the official A2A SDK: only serve a2a's tests use it (decision 0035)
    "tree_sitter_go",  # RAG code-aware chunking: only when a Go file is indexed
    "tree_sitter_python",  # ... or a Python file
)


def imported_after(code: str) -> list[str]:
    """The HEAVY modules loaded once ``code`` ran in a fresh interpreter."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize(
    "module",
    [
        "greenroom.serve",
        "greenroom.cli",
        "greenroom.cli_modes",  # serve mcp / serve acp: their parser (decision 0031)
        "greenroom.serve._server",  # the whole server: store, actors, agents, transport
        "greenroom.serve._a2a",  # serve a2a: the protocol by hand, no SDK
        "greenroom.agents.providers",
        "greenroom.cluster",
    ],
)
def test_the_entry_points_import_no_sdk(module: str) -> None:
    assert imported_after(f"import {module}") == []


def test_validating_and_serving_an_echo_agent_import_no_sdk() -> None:
    code = """
from pathlib import Path
from greenroom.agents import bundled_agent_path, validate_files
from greenroom.agents.providers import ModelConfig, make_provider
from greenroom.agents.tools import TOOLSET_BUILDERS
from greenroom.serve import ServeConfig, check_config
validate_files([str(bundled_agent_path())])
make_provider(ModelConfig(name="m", provider="echo", model="echo"))
assert "mcp" in TOOLSET_BUILDERS and "fetch" in TOOLSET_BUILDERS
TOOLSET_BUILDERS["think"]
"""
    assert imported_after(code) == []


def test_a_provider_imports_its_sdk_when_it_is_made() -> None:
    code = """
from greenroom.agents.providers import ModelConfig, make_provider
make_provider(ModelConfig(name="m", provider="anthropic", model="claude"), env={})
"""
    assert imported_after(code) == ["anthropic"]


def test_the_mcp_toolset_imports_the_mcp_sdk_on_first_lookup() -> None:
    code = """
from greenroom.agents.tools import TOOLSET_BUILDERS
TOOLSET_BUILDERS["mcp"]
"""
    assert imported_after(code) == ["mcp", "httpx"]  # the MCP SDK speaks HTTP through httpx


def test_the_lazy_provider_classes_resolve() -> None:
    import greenroom.agents.providers as providers

    assert providers.OpenAIProvider.__name__ == "OpenAIProvider"
    assert "GoogleProvider" in dir(providers)
    with pytest.raises(AttributeError):
        _ = providers.NoSuchProvider


def test_a_code_mode_agent_never_loads_the_interpreter_in_the_server() -> None:
    code = """
from greenroom.agents import LocalRuntime, parse_agent_file
text = "agents:\\n  root:\\n    model: openai/x\\n    code_mode_tools: true\\n"
config = parse_agent_file(text + "    toolsets:\\n      - type: shell\\n", "a.yaml")
tools = LocalRuntime(config, provider_for=lambda model: None).tools_of()
assert list(tools.tools) == ["run_tools_with_javascript"], list(tools.tools)
"""
    assert imported_after(code) == []


def test_tracing_off_imports_no_opentelemetry_at_all() -> None:
    """Off (the default), a span is the shared no-op: not even the OpenTelemetry API loads."""
    code = """
import greenroom.serve._server, greenroom.cli
from greenroom.observe import capture, inject, span
with span("x", {"k": 1}) as s:
    s.set_attribute("k", 2)
assert capture() is None
inject({})
import sys
assert not [m for m in sys.modules if m.startswith("opentelemetry")], "opentelemetry imported"
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_tracing_on_imports_the_sdk() -> None:
    code = """
from greenroom.observe import setup_tracing
assert setup_tracing("n", env={"OTEL_TRACES_EXPORTER": "console"})
"""
    assert imported_after(code) == ["opentelemetry.sdk"]


def test_the_code_grammars_load_when_a_source_file_is_cut() -> None:
    code = """
from greenroom.agents._rag_config import RagChunking
from greenroom.agents.tools._rag_code import code_chunks
code_chunks("notes.md", "just text", RagChunking(code_aware=True))
import sys
assert "tree_sitter_go" not in sys.modules
code_chunks("a.go", "package a\\nfunc A() {}\\n", RagChunking(code_aware=True))
"""
    assert imported_after(code) == ["tree_sitter_go"]
