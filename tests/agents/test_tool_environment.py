"""Secrets stay out of tool processes (issue 23): a shell or script command does not see
greenroom's token or the model providers' keys unless the agent file passes them (``env:``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.agents import ToolContext, ToolsetConfig
from greenroom.agents.tools import build_tools

pytestmark = pytest.mark.slow

SERVER_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "SHELL": "/bin/sh",
    "HOME": "/home/someone",
    "GREENROOM_AUTH_TOKEN": "server-token",
    "GREENROOM_DB": "postgresql://user:pw@db/greenroom",
    "OPENAI_API_KEY": "sk-openai",
    "ANTHROPIC_API_KEY": "sk-anthropic",
    "GEMINI_API_KEY": "g-key",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_BEARER_TOKEN_BEDROCK": "bedrock",
    "SOMEVENDOR_API_KEY": "vendor",
    "MY_MODEL_TOKEN": "named-by-token-key",
    "PLAIN": "kept",
}


async def printenv(kind: str, options: dict[str, Any], tmp_path: Path, **ctx: Any) -> set[str]:
    context = ToolContext(working_dir=tmp_path, env=SERVER_ENV, **ctx)
    toolset = build_tools([ToolsetConfig(kind, options)], context)
    try:
        name = "shell" if kind == "shell" else "dump"
        args = {"cmd": "env"} if kind == "shell" else {}
        with trio.fail_after(20):
            result = await toolset.tools[name].call(args)
    finally:
        toolset.close()
    return {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}


async def test_shell_commands_do_not_see_the_servers_secrets(tmp_path: Path) -> None:
    seen = await printenv("shell", {}, tmp_path, secret_env=frozenset({"MY_MODEL_TOKEN"}))
    assert {"PATH", "HOME", "PLAIN"} <= seen
    leaked = seen & (set(SERVER_ENV) - {"PATH", "HOME", "PLAIN", "SHELL"})
    assert leaked == set()


async def test_script_commands_do_not_see_them_either(tmp_path: Path) -> None:
    options = {"shell": {"dump": {"cmd": "env"}}}
    seen = await printenv("script", options, tmp_path)
    assert "PLAIN" in seen
    assert not seen & {"GREENROOM_AUTH_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"}


async def test_the_agent_file_can_pass_a_secret_on_purpose(tmp_path: Path) -> None:
    options = {"env": {"OPENAI_API_KEY": "${env.OPENAI_API_KEY}", "EXTRA": "x"}}
    context = ToolContext(working_dir=tmp_path, env=SERVER_ENV)
    toolset = build_tools([ToolsetConfig("shell", options)], context)
    try:
        with trio.fail_after(20):
            result = await toolset.tools["shell"].call({"cmd": 'echo "$OPENAI_API_KEY $EXTRA"'})
    finally:
        toolset.close()
    assert result.output == "sk-openai x"


def test_local_mcp_servers_start_without_the_secrets_too(tmp_path: Path) -> None:
    from greenroom.agents.mcp import StdioSpec, server_spec

    ctx = ToolContext(working_dir=tmp_path, env=SERVER_ENV)
    options = {"command": "srv", "env": {"OPENAI_API_KEY": "${env.OPENAI_API_KEY}"}}
    spec = server_spec(options, ctx)
    assert isinstance(spec, StdioSpec)
    assert spec.env["OPENAI_API_KEY"] == "sk-openai"  # passed on purpose
    assert spec.env["PLAIN"] == "kept"
    assert not {"GREENROOM_AUTH_TOKEN", "ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"} & set(
        spec.env
    )
