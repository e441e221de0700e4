"""``greenroom validate`` on agent files with ``lsp`` toolsets: served (no warning), and the
toolset's own keys checked as docker-agent checks them."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from greenroom.agents import parse_agent_file
from greenroom.agents._diagnose import DockerMcp, diagnose
from greenroom.agents._validate import validate_main
from greenroom.errors import AgentConfigError

SERVED = """\
agents:
  developer:
    model: openai/gpt-fake
    toolsets:
      - type: lsp
        command: gopls
        args: []
        env: {GOFLAGS: -mod=mod}
        file_types: [".go"]
      - type: lsp
        command: pylsp
        file_types: [".py"]
"""


def no_docker() -> DockerMcp:
    return DockerMcp(False, "no docker CLI on PATH")


def test_validate_does_not_warn_about_lsp_toolsets(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(SERVED)
    out = io.StringIO()
    assert validate_main([str(path)], out=out) == 0
    assert "warning" not in out.getvalue()
    assert out.getvalue().splitlines()[-1] == "1 file: 1 ok"
    assert diagnose(parse_agent_file(SERVED, str(path)), docker=no_docker) == []


@pytest.mark.parametrize(
    ("toolset", "expected"),
    [
        (
            "- type: lsp\n",
            "agent.yaml:5: agents.root.toolsets[0].command: lsp toolset requires a command",
        ),
        (
            "- type: lsp\n  command: gopls\n  file_types: .go\n",
            "agent.yaml:7: agents.root.toolsets[0].file_types: expected a list of extensions",
        ),
    ],
)
def test_lsp_keys_are_checked(toolset: str, expected: str) -> None:
    text = "agents:\n  root:\n    model: openai/x\n    toolsets:\n" + textwrap.indent(
        toolset, "      "
    )
    with pytest.raises(AgentConfigError) as info:
        parse_agent_file(text, "agent.yaml")
    found = str(info.value)
    assert expected in found, found


def test_version_is_accepted_with_a_warning() -> None:
    text = (
        "agents:\n  root:\n    model: openai/x\n    toolsets:\n"
        "      - type: lsp\n        command: gopls\n        version: golang/tools@v0.21.0\n"
    )
    config = parse_agent_file(text, "agent.yaml")
    lines = diagnose(config, docker=no_docker)
    assert lines == [
        "agent.yaml:7: agents.root.toolsets[0].version: warning: ignored: greenroom does not "
        "implement this key (the command must be on PATH)"
    ]
