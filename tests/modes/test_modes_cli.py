"""``greenroom serve mcp|acp`` on the command line: what it refuses, and that ``greenroom
serve`` itself is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

import greenroom.serve
from greenroom.cli import main
from greenroom.cli_modes import is_mode
from greenroom.serve import ServeConfig
from greenroom.testing import ScriptedAgent

AGENT = ScriptedAgent(turns=["hi"], loop=True)


def test_only_serve_followed_by_a_mode_is_a_mode() -> None:
    assert is_mode(["serve", "mcp", "a.yaml"])
    assert is_mode(["serve", "acp", "a.yaml"])
    assert not is_mode(["serve", "mcp.yaml"])
    assert not is_mode(["serve", "--port", "0", "mcp"])  # an agent file called mcp, after flags
    assert not is_mode(["chat", "mcp"])


def test_serve_without_a_mode_still_serves_http(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    assert main(["serve", "--port", "0", "--db", ":memory:"]) == 0
    assert seen[0].port == 0


@pytest.mark.parametrize("mode", ["mcp", "acp"])
def test_a_mode_has_its_own_help(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", mode, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: greenroom serve {mode} ")
    assert "--db PATH|:memory:" in out


@pytest.mark.parametrize("mode", ["mcp", "acp"])
def test_a_mode_needs_an_agent_file(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", mode])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"greenroom serve {mode}: error:" in err
    assert "AGENT_FILE" in err


@pytest.mark.parametrize("mode", ["mcp", "acp"])
def test_an_unknown_agent_is_refused_naming_the_agents(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = AGENT.write(tmp_path, "team")
    code = main(["serve", mode, str(path), "--agent", "nobody", "--data-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--agent nobody: no such agent" in err
    assert "root" in err  # the agents there are


@pytest.mark.parametrize("mode", ["mcp", "acp"])
def test_a_missing_agent_file_is_refused(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", mode, str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("greenroom: ")
    assert "nope.yaml" in err


def test_a_cluster_database_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = AGENT.write(tmp_path, "team")
    code = main(["serve", "mcp", str(path), "--db", "postgresql://127.0.0.1/none"])
    assert code == 2
    assert "greenroom serve" in capsys.readouterr().err  # where a cluster is served


def test_acp_serves_one_agent_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one, two = AGENT.write(tmp_path, "one"), AGENT.write(tmp_path, "two")
    with pytest.raises(SystemExit) as exited:
        main(["serve", "acp", str(one), str(two)])
    assert exited.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_acp_refuses_a_directory_of_several_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    AGENT.write(tmp_path, "one")
    AGENT.write(tmp_path, "two")
    assert main(["serve", "acp", str(tmp_path)]) == 2
    assert "one agent file" in capsys.readouterr().err


def test_mcp_http_refuses_a_public_address_without_being_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = AGENT.write(tmp_path, "team")
    assert main(["serve", "mcp", str(path), "--http", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to serve MCP on 0.0.0.0" in err
    assert "--insecure-no-auth" in err
