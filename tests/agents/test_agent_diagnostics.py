"""What ``greenroom validate`` (and ``serve`` at startup) says about an agent file.

Errors: what cannot work (an unknown toolset type, provider, model or agent). Warnings: what
greenroom accepts and will not do (toolsets without a builder, ignored keys, catalog
sub-agents, a missing Docker MCP gateway). The fixture files are written for these tests.
"""

from __future__ import annotations

import io
import json
import os
import stat
import textwrap
from pathlib import Path

import pytest

from greenroom.agents import TOOLSET_BUILDERS, AgentFile, agent_file_to_json, parse_agent_file
from greenroom.agents._diagnose import (
    DockerMcp,
    FileReport,
    diagnose,
    docker_mcp_here,
    probe_docker_mcp,
    summary,
    unknown_models,
)
from greenroom.agents._validate import validate_main
from greenroom.errors import AgentConfigError
from greenroom.serve import load_sources


def parse(text: str) -> AgentFile:
    return parse_agent_file(textwrap.dedent(text), "agent.yaml")


def problems(text: str) -> tuple[str, ...]:
    with pytest.raises(AgentConfigError) as info:
        parse(text)
    return info.value.problems


def no_docker() -> DockerMcp:
    return DockerMcp(False, "no docker CLI on PATH")


def docker_ok() -> DockerMcp:
    return DockerMcp(True, "docker mcp")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "agents:\n  root:\n    model: openai/x\n    toolsets:\n      - type: shel\n",
            "agent.yaml:5: agents.root.toolsets[0].type: unknown toolset type 'shel' "
            "(did you mean 'shell'?)",
            id="toolset-typo",
        ),
        pytest.param(
            "agents:\n  root:\n    model: opanai/gpt-4o\n",
            "agent.yaml:3: agents.root.model: unknown provider 'opanai'",
            id="inline-provider-typo",
        ),
        pytest.param(
            "agents:\n  root: {model: m}\nmodels:\n  m: {provider: antropic, model: c}\n",
            "agent.yaml:4: models.m.provider: unknown provider 'antropic'",
            id="model-provider-typo",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/x,nope\n",
            "agent.yaml:3: agents.root.model: unknown model 'nope'",
            id="alloy-part",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/x\n    fallback:\n      models: [ghost]\n",
            "agent.yaml:5: agents.root.fallback.models[0]: unknown model 'ghost'",
            id="fallback-model",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/x\n    fallback: {models: [], cooldown: soon}\n",
            "agent.yaml:4: agents.root.fallback.cooldown: expected a duration",
            id="fallback-cooldown",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/x\n    handoffs: [ghost]\n",
            "agent.yaml:4: agents.root.handoffs[0]: unknown agent 'ghost'",
            id="handoff-target",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/x\n    toolsets:\n      - {type: mcp, ref: gh}\n",
            "agent.yaml:5: agents.root.toolsets[0].ref: no MCP definition 'gh'",
            id="mcp-definition",
        ),
        pytest.param(
            "providers:\n  gw: {api_type: soap, base_url: http://x}\n"
            "agents:\n  root: {model: gw/m}\n",
            "agent.yaml:2: providers.gw.api_type: unknown api_type 'soap'",
            id="api-type",
        ),
        pytest.param(
            "providers:\n  gw: {token_key: K}\nagents:\n  root: {model: gw/m}\n",
            "agent.yaml:2: providers.gw.base_url: is required",
            id="provider-without-url",
        ),
        pytest.param(
            "providers:\n  openai: {base_url: http://x}\nagents:\n  root: {model: openai/m}\n",
            "agent.yaml:2: providers.openai: 'openai' is a built-in provider",
            id="provider-shadowing",
        ),
        pytest.param(
            "agents:\n  root: {model: m}\nmodels:\n"
            "  m: {provider: echo, model: echo, provider_opts: {token_delay: 900}}\n",
            "agent.yaml:4: models.m.provider_opts.token_delay: expected seconds from 0 to 60",
            id="echo-delay",
        ),
    ],
)
def test_errors_name_file_line_and_path(text: str, expected: str) -> None:
    found = problems(text)
    assert any(line.startswith(expected) for line in found), found


WARNED = """\
agents:
  root:
    model: big,small
    rag: []
    sub_agents: [helper, agentcatalog/pirate]
    toolsets:
      - type: think
      - type: memory
      - type: mcp
        ref: docker:duckduckgo
  helper:
    model: old
    rag: []
models:
  big: {provider: openai, model: gpt-4o, output_capabilities: {}}
  small: {provider: google, model: gemini, provider_opts: {project: p, location: l}}
  old: {provider: chatgpt, model: gpt-5}
rag: {}
metadata: {author: someone}
"""


def test_warnings_name_what_greenroom_will_not_do() -> None:
    config = parse(WARNED)
    assert config.agents["root"].sub_agents == ("helper",)
    lines = diagnose(config, docker=no_docker, builders={"think": object()})
    expected = [
        "agent.yaml:5: agents.root.sub_agents[1]: warning: agent 'agentcatalog/pirate' from "
        "a catalog or registry is not checked offline (greenroom serve pulls it",
        "agent.yaml:8: agents.root.toolsets[1]: warning: toolset type 'memory' is not "
        "supported by greenroom yet",
        "agent.yaml:9: agents.root.toolsets[2]: warning: toolset type 'mcp' is not supported "
        "by greenroom yet (left out); catalog server 'duckduckgo' needs Docker's MCP gateway "
        "(no docker CLI on PATH): install Docker Desktop",
        "agent.yaml:15: models.big.output_capabilities: warning: ignored",
        "agent.yaml:16: models.small.provider_opts: warning: Vertex AI",
        "agent.yaml:17: models.old.provider: warning: provider 'chatgpt' is not supported",
    ]
    assert len(lines) == len(expected), lines
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), (line, start)


def test_toolset_warnings_follow_the_builder_table() -> None:
    config = parse(
        "agents:\n  root:\n    model: openai/x\n    toolsets:\n"
        "      - type: think\n      - type: todo\n"
    )
    assert "think" in TOOLSET_BUILDERS
    assert diagnose(config, builders={}) == [
        "agent.yaml:5: agents.root.toolsets[0]: warning: toolset type 'think' is not supported "
        "by greenroom yet (left out)",
        "agent.yaml:6: agents.root.toolsets[1]: warning: toolset type 'todo' is not supported "
        "by greenroom yet (left out)",
    ]
    assert diagnose(config, builders={"think": object(), "todo": object()}) == []
    expected_default = [] if "todo" in TOOLSET_BUILDERS else ["toolsets[1]"]
    found = [line.split(": ")[1] for line in diagnose(config)]
    assert found == [f"agents.root.{item}" for item in expected_default]


def test_a_docker_catalog_server_with_the_gateway_at_hand() -> None:
    config = parse(
        "agents:\n  root:\n    model: openai/x\n    toolsets:\n"
        "      - {type: mcp, ref: 'docker:fetch'}\n"
    )
    [line] = diagnose(config, builders={}, docker=docker_ok)
    assert "docker-agent starts it with `docker mcp gateway run --servers fetch" in line
    # Once MCP toolsets are served, an available gateway is no longer worth a warning...
    assert diagnose(config, builders={"mcp": object()}, docker=docker_ok) == []
    # ... but a missing one still is.
    [missing] = diagnose(config, builders={"mcp": object()}, docker=no_docker)
    assert "needs Docker's MCP gateway (no docker CLI on PATH): install Docker Desktop" in missing


def _fake_docker(directory: Path, exit_code: int) -> None:
    script = directory / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = mcp ] && [ "$2" = version ]; then echo v0.1; exit {exit_code}; fi\n'
        "exit 2\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(("exit_code", "available"), [(0, True), (1, False)])
def test_the_docker_probe_runs_the_cli_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int, available: bool
) -> None:
    _fake_docker(tmp_path, exit_code)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    found = docker_mcp_here()
    assert found.available is available
    assert str(tmp_path / "docker") in found.detail
    if not available:
        assert "no working mcp plugin" in found.detail


def test_the_docker_probe_without_docker(tmp_path: Path) -> None:
    assert probe_docker_mcp(which=lambda _: None) == DockerMcp(False, "no docker CLI on PATH")


def test_summary_counts_each_outcome() -> None:
    reports = [
        FileReport("a"),
        FileReport("b", warnings=("w",)),
        FileReport("c", errors=("e",)),
        FileReport("d"),
    ]
    assert summary(reports) == "4 files: 2 ok, 1 with warnings, 1 with errors"
    assert summary(reports[:1]) == "1 file: 1 ok"
    assert summary(reports[1:2]) == "1 file: 1 with warnings"


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def test_validate_exit_codes_and_summary(tmp_path: Path) -> None:
    ok = _write(tmp_path, "ok.yaml", "agents:\n  root: {model: openai/x}\n")
    warned = _write(
        tmp_path,
        "warned.yaml",
        "agents:\n  root: {model: m}\nmodels:\n  m: {provider: openai, model: x, "
        "output_capabilities: {}}\n",
    )
    broken = _write(tmp_path, "broken.yaml", "agents:\n  root: {model: openai/x, modle: y}\n")
    out = io.StringIO()
    assert validate_main([str(ok), str(warned)], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[-1] == "2 files: 1 ok, 1 with warnings"
    assert f"{warned}:4: models.m.output_capabilities: warning: ignored" in out.getvalue()
    out = io.StringIO()
    assert validate_main([str(tmp_path)], out=out) == 1
    text = out.getvalue()
    assert text.splitlines()[-1] == "3 files: 1 ok, 1 with warnings, 1 with errors"
    assert f"{broken}:2: agents.root.modle: unknown key" in text
    assert f"{broken}: 1 error(s)" in text


def test_validate_takes_code_mode_tools_without_a_warning(tmp_path: Path) -> None:
    """docker-agent's examples/code_mode.yaml shape: the key is applied (decision 0032)."""
    path = _write(
        tmp_path,
        "code_mode.yaml",
        "agents:\n  root:\n    model: openai/x\n    code_mode_tools: true\n"
        "    toolsets:\n      - type: filesystem\n      - type: shell\n",
    )
    out = io.StringIO()
    assert validate_main([str(path)], out=out) == 0
    assert "warning" not in out.getvalue()
    assert out.getvalue().splitlines()[-1] == "1 file: 1 ok"


def test_serve_gets_the_same_warnings_at_startup(tmp_path: Path) -> None:
    """validate's warnings, then (serve only) the models nobody knows a price or window of."""
    path = _write(tmp_path, "team.yaml", WARNED)
    sources, warnings = load_sources((str(path),))
    assert sources.keys() == ["team"]
    config = sources.get("team")
    assert warnings == diagnose(config) + unknown_models(config)
    assert unknown_models(config)  # the file's models are made up
    assert any("agents.root.sub_agents[1]: warning:" in line for line in warnings)
    assert all(line.startswith(f"{path}:") for line in warnings)


def test_the_json_view_shows_providers_fallbacks_and_options() -> None:
    config = parse(
        """\
        providers:
          gw: {base_url: "http://gw/v1", token_key: GW_KEY}
        models:
          slow: {provider: echo, model: echo, provider_opts: {token_delay: 0.5}}
        agents:
          root:
            model: slow
            fallback: {models: [gw/m]}
        """
    )
    data = agent_file_to_json(config)
    assert data["providers"] == {
        "gw": {
            "base_url": "http://gw/v1",
            "token_key": "GW_KEY",
            "api_type": "openai_chatcompletions",
        }
    }
    assert data["models"]["slow"]["provider_opts"] == {"token_delay": 0.5}
    assert data["agents"]["root"]["fallback"] == {"models": ["gw/m"]}
    assert json.loads(json.dumps(data)) == data


def test_generic_toolset_keys_toon_and_model_are_applied_not_warned() -> None:
    config = parse(
        "agents:\n  root:\n    model: openai/x\n    toolsets:\n"
        "      - type: think\n        toon: 'list_.*'\n        model: openai/small\n"
    )
    assert config.warnings == ()
    assert config.agents["root"].toolsets[0].options["model"] == "openai/small"
