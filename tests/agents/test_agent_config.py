"""Agent files: parsing valid files and reporting each kind of fault with its file and line."""

from __future__ import annotations

import io
import textwrap

import pytest

from greenroom.agents import (
    AgentFile,
    Command,
    agent_file_to_json,
    load_agent_file,
    parse_agent_file,
    validate_files,
    validate_main,
)
from greenroom.agents.providers import ModelConfig
from greenroom.domain import Permissions
from greenroom.errors import AgentConfigError, AgentNotFound, InvalidRequest

FULL = """\
version: "2"
agents:
  root:
    model: gpt
    description: Root agent
    instruction: |
      Be helpful.
    welcome_message: Hi!
    sub_agents: [helper]
    toolsets:
      - type: think
      - type: mcp
        ref: docker:duckduckgo
        tools: [search]
    commands:
      plan: {description: Switch to planning, agent: helper}
      fix: Fix the bug
    max_iterations: 12
    max_tool_result_tokens: 500
    add_date: true
  helper:
    model: anthropic/claude-sonnet-4-0
    description: Helps
    commands:
      - go: {instruction: "Go ${args}", agent: root}
      - ask: Ask something
models:
  gpt:
    provider: openai
    model: gpt-4o
    base_url: http://localhost:8080/v1
    token_key: MY_KEY
    temperature: 0.2
    max_tokens: 1000
    title_model: openai/gpt-4o-mini
permissions:
  allow: ["think"]
  ask: ["shell*"]
  deny: ["rm_*"]
"""


def parse(text: str) -> AgentFile:
    return parse_agent_file(textwrap.dedent(text), "agent.yaml")


def problems(text: str) -> list[str]:
    with pytest.raises(AgentConfigError) as info:
        parse(text)
    return list(info.value.problems)


def test_full_file_parses_into_frozen_values() -> None:
    config = parse(FULL)
    assert config.version == "2"
    assert list(config.agents) == ["root", "helper"]
    root = config.agents["root"]
    assert root.model == "gpt"
    assert root.instruction == "Be helpful.\n"
    assert root.welcome_message == "Hi!"
    assert root.sub_agents == ("helper",)
    assert [t.type for t in root.toolsets] == ["think", "mcp"]
    assert dict(root.toolsets[1].options) == {"ref": "docker:duckduckgo", "tools": ("search",)}
    assert root.commands["plan"] == Command(description="Switch to planning", agent="helper")
    assert root.commands["fix"] == Command(instruction="Fix the bug")
    assert (root.max_iterations, root.max_tool_result_tokens, root.add_date) == (12, 500, True)
    helper = config.agents["helper"]
    assert helper.commands["go"] == Command(instruction="Go ${args}", agent="root")
    assert helper.commands["ask"] == Command(instruction="Ask something")
    assert config.models["gpt"] == ModelConfig(
        name="gpt",
        provider="openai",
        model="gpt-4o",
        base_url="http://localhost:8080/v1",
        token_key="MY_KEY",
        temperature=0.2,
        max_tokens=1000,
        title_model="openai/gpt-4o-mini",
    )
    assert config.permissions == Permissions(allow=["think"], ask=["shell*"], deny=["rm_*"])
    assert config.warnings == ()
    with pytest.raises(TypeError):
        config.agents["x"] = root  # type: ignore[index]


def test_agent_selection_and_model_refs() -> None:
    config = parse(FULL)
    assert config.default_agent.name == "root"
    assert config.agent("").name == "root"
    assert config.agent("helper").name == "helper"
    with pytest.raises(AgentNotFound):
        config.agent("nobody")
    first_only = parse("agents:\n  a: {model: openai/y}\n  b: {model: openai/z}\n")
    assert first_only.default_agent.name == "a"
    assert config.model_config("gpt").model == "gpt-4o"
    inline = config.model_config("anthropic/claude-sonnet-4-0")
    assert (inline.provider, inline.model, inline.ref) == (
        "anthropic",
        "claude-sonnet-4-0",
        "anthropic/claude-sonnet-4-0",
    )
    auto = ModelConfig(name="auto", provider="echo", model="echo")
    assert config.model_config("auto", auto=auto) is auto
    with pytest.raises(InvalidRequest):
        config.model_config("auto")
    with pytest.raises(InvalidRequest):
        config.model_config("nonsense")


def test_auto_model_and_version_number_are_accepted() -> None:
    config = parse("version: 2\nagents:\n  root:\n    model: auto\n")
    assert config.version == "2"
    assert config.agents["root"].model == "auto"


def test_docker_agent_keys_greenroom_ignores_are_listed_not_fatal() -> None:
    config = parse(
        """\
        agents:
          root:
            model: b
        models:
          b: {provider: openai, model: b, output_capabilities: {}}
        """
    )
    assert config.warnings == (
        "agent.yaml:5: models.b.output_capabilities: warning: ignored: greenroom does not "
        "implement this key",
    )


def test_code_mode_tools_is_a_boolean_greenroom_applies() -> None:
    config = parse(
        """\
        agents:
          root:
            model: openai/b
            code_mode_tools: true
          other:
            model: openai/b
        """
    )
    assert config.warnings == ()
    assert config.agents["root"].code_mode_tools is True
    assert config.agents["other"].code_mode_tools is False
    assert agent_file_to_json(config)["agents"]["root"]["code_mode_tools"] is True
    assert problems("agents:\n  root:\n    model: openai/b\n    code_mode_tools: 1\n") == [
        "agent.yaml:4: agents.root.code_mode_tools: expected a boolean, got integer 1"
    ]


def test_json_view_leaves_empty_fields_out() -> None:
    data = agent_file_to_json(parse(FULL))
    root = data["agents"]["root"]
    assert root["commands"]["plan"] == {"description": "Switch to planning", "agent": "helper"}
    assert root["toolsets"][1] == {"type": "mcp", "ref": "docker:duckduckgo", "tools": ["search"]}
    assert "welcome_message" not in data["agents"]["helper"]
    assert data["models"]["gpt"]["temperature"] == 0.2
    assert "name" not in data["models"]["gpt"]
    assert data["permissions"] == {"allow": ["think"], "ask": ["shell*"], "deny": ["rm_*"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    modle: x\n",
            "agent.yaml:4: agents.root.modle: unknown key",
            id="unknown-agent-key",
        ),
        pytest.param(
            "agents:\n  root: {model: openai/b}\nextra: 1\n",
            "agent.yaml:3: extra: unknown key",
            id="unknown-top-key",
        ),
        pytest.param(
            "agents:\n  root:\n    description: no model\n",
            "agent.yaml:2: agents.root.model: is required",
            id="missing-model",
        ),
        pytest.param(
            "agents:\n  root:\n    model: nope\n",
            "agent.yaml:3: agents.root.model: unknown model 'nope'",
            id="unknown-model-ref",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    max_iterations: many\n",
            "agent.yaml:4: agents.root.max_iterations: expected a non-negative integer, "
            "got string 'many'",
            id="wrong-type",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    add_date: 1\n",
            "agent.yaml:4: agents.root.add_date: expected a boolean, got integer 1",
            id="int-is-not-bool",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    sub_agents:\n      - ghost\n",
            "agent.yaml:5: agents.root.sub_agents[0]: unknown agent 'ghost'",
            id="unknown-sub-agent",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    commands:\n      go: {agent: ghost}\n",
            "agent.yaml:5: agents.root.commands.go.agent: unknown agent 'ghost'",
            id="unknown-switch-target",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    commands:\n      - go: {agent: ghost}\n",
            "agent.yaml:5: agents.root.commands.go.agent: unknown agent 'ghost'",
            id="unknown-switch-target-list-form",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    commands:\n      go: {agnt: root}\n",
            "agent.yaml:5: agents.root.commands.go.agnt: unknown key",
            id="unknown-command-key",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    toolsets:\n      - command: ls\n",
            "agent.yaml:5: agents.root.toolsets[0].type: is required",
            id="toolset-without-type",
        ),
        pytest.param(
            "agents:\n  root: {model: m}\nmodels:\n  m:\n    provider: openai\n",
            "agent.yaml:4: models.m.model: is required",
            id="model-without-model",
        ),
        pytest.param(
            "agents:\n  root: {model: m}\nmodels:\n"
            "  m: {provider: openai, model: x, max_tokens: 0}\n",
            "agent.yaml:4: models.m.max_tokens: expected a positive integer, got integer 0",
            id="max-tokens-zero",
        ),
        pytest.param(
            "agents:\n  root: {model: openai/b}\npermissions:\n  deny: rm\n",
            "agent.yaml:4: permissions.deny: expected a list of strings, got string 'rm'",
            id="permissions-not-a-list",
        ),
        pytest.param(
            "agents:\n  root:\n    model: openai/b\n    harness: {type: codex}\n",
            "agent.yaml:4: agents.root.harness: harness agents are not supported",
            id="harness",
        ),
        pytest.param("agents: {}\n", "agent.yaml:1: agents: declares no agent", id="no-agents"),
        pytest.param("models: {}\n", "agent.yaml:1: agents: is required", id="agents-missing"),
        pytest.param("", "agent.yaml:1: (document): the file is empty", id="empty"),
        pytest.param("- a\n", "agent.yaml:1: (document): expected a mapping", id="list"),
        pytest.param(
            "agents:\n  root: {model: openai/b\n",
            "agent.yaml:3: (yaml): ",
            id="yaml-syntax",
        ),
        pytest.param(
            "agents:\n  root: {model: openai/b}\n  root: {model: openai/c}\n",
            "agent.yaml:3: (yaml): ",
            id="duplicate-key",
        ),
    ],
)
def test_each_fault_names_file_line_and_path(text: str, expected: str) -> None:
    found = problems(text)
    assert any(line.startswith(expected) for line in found), found


def test_all_faults_are_reported_in_line_order() -> None:
    found = problems(
        """\
        agents:
          root:
            model: missing
            bogus: 1
          helper:
            description: x
        """
    )
    assert [line.split(": ")[0] for line in found] == [
        "agent.yaml:3",
        "agent.yaml:4",
        "agent.yaml:5",
    ]


def test_error_is_an_invalid_request_with_the_first_path() -> None:
    with pytest.raises(AgentConfigError) as info:
        parse("agents:\n  root:\n    model: openai/b\n    add_date: maybe\n")
    exc = info.value
    assert isinstance(exc, InvalidRequest)
    assert (exc.status, exc.code, exc.path) == (400, "invalid_agent_config", "agents.root.add_date")
    assert str(exc) == exc.problems[0]


def test_load_reads_a_file_and_reports_unreadable_ones(tmp_path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(FULL)
    assert load_agent_file(good).path == str(good)
    with pytest.raises(AgentConfigError, match="cannot read"):
        load_agent_file(tmp_path / "missing.yaml")


def test_validate_files_and_main(tmp_path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(FULL)
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  root:\n    model: nope\n")
    assert validate_files([good]) == []
    assert validate_files([good, bad]) == [
        f"{bad}:3: agents.root.model: unknown model 'nope' "
        "(not in models; use a models name, 'auto' or provider/model)"
    ]
    assert len(validate_files([tmp_path])) == 1
    out = io.StringIO()
    assert validate_main([str(good)], out=out) == 0
    assert f"{good}: ok, 1 warning(s) (2 agent(s))" in out.getvalue()
    out = io.StringIO()
    assert validate_main([str(good), str(bad)], out=out) == 1
    assert f"{bad}:3: agents.root.model" in out.getvalue()
    assert validate_main([], out=io.StringIO()) == 2


def test_an_mcp_toolset_takes_its_mcps_definition_with_its_own_keys_winning() -> None:
    config = parse(
        """\
        mcps:
          files:
            command: mcp-files
            args: [--root, .]
            env: {A: from-definition, B: from-definition}
            tools: [read_file]
          search:
            ref: docker:duckduckgo
        agents:
          root:
            model: openai/b
            toolsets:
              - type: mcp
                ref: files
                env: {B: from-toolset}
                name: fs
              - type: mcp
                ref: search
        """
    )
    files, search = (dict(t.options) for t in config.agents["root"].toolsets)
    assert files == {
        "command": "mcp-files",
        "args": ("--root", "."),  # options are deeply frozen
        "env": {"A": "from-definition", "B": "from-toolset"},
        "tools": ("read_file",),
        "name": "fs",
    }
    assert search == {"ref": "docker:duckduckgo"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "mcps:\n  x: {ref: files}\nagents:\n  root:\n    model: openai/b\n",
            "agent.yaml:2: mcps.x.ref: an MCP definition's ref must be docker:<name>",
        ),
        (
            "agents:\n  root:\n    model: openai/b\n"
            "    toolsets:\n      - {type: mcp, ref: nope}\n",
            "no MCP definition 'nope' in the file's mcps",
        ),
        (
            "agents:\n  root:\n    model: openai/b\n    handoffs: [ghost]\n",
            "agents.root.handoffs[0]: unknown agent 'ghost'",
        ),
    ],
)
def test_mcps_and_handoffs_are_checked(text: str, problem: str) -> None:
    with pytest.raises(AgentConfigError) as caught:
        parse_agent_file(text, "agent.yaml")
    assert any(problem in line for line in caught.value.problems), caught.value.problems


def test_runtime_titles_turns_titles_off_and_must_be_a_boolean() -> None:
    assert parse("agents:\n  root: {model: openai/a}\n").titles
    off = parse("agents:\n  root: {model: openai/a}\nruntime:\n  titles: false\n")
    assert not off.titles
    assert problems("agents:\n  root: {model: openai/a}\nruntime:\n  titles: sometimes\n") == [
        "agent.yaml:4: runtime.titles: expected true or false, got string 'sometimes'"
    ]
