"""``greenroom serve`` options reach the server's configuration (the server itself is not run)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

import greenroom.serve
from greenroom.cli import main
from greenroom.serve import ServeConfig


@pytest.mark.parametrize(("flags", "titles"), [([], True), (["--no-titles"], False)])
def test_no_titles_turns_titles_off(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], titles: bool
) -> None:
    seen: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    assert main(["serve", "--port", "0", *flags, "--log-level", "warning"]) == 0
    (cfg,) = seen
    assert cfg.titles is titles


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--port", "70000"], "--port: '70000' is not a port (0 to 65535"),
        (["--port", "-1"], "--port: '-1' is not a port (0 to 65535"),
        (["--port", "http"], "--port: 'http' is not a port"),
        (["--lease-ttl", "0"], "--lease-ttl: '0' is not a number of seconds (more than 0)"),
        (["--drain-timeout", "-1"], "--drain-timeout: '-1' is not a number of seconds (0 or"),
        (["--keep-alive-timeout", "inf"], "--keep-alive-timeout: 'inf' is not a number"),
        (["--mcp-call-timeout", "nan"], "--mcp-call-timeout: 'nan' is not a number"),
        (["--max-connections-per-client", "-3"], "--max-connections-per-client: '-3' is not"),
        (["--retain-deltas", "soon"], "--retain-deltas: 'soon' is not a duration"),
    ],
)
def test_a_bad_flag_value_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", *flags])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("greenroom serve: error: argument ")
    assert named in err


def test_a_port_in_use_is_refused_before_the_server_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_run(cfg: ServeConfig) -> int:
        raise AssertionError("the server must not start")

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert main(["serve", "--port", str(busy), "--db", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"greenroom: cannot listen on 127.0.0.1:{busy}: it is in use "
        "(choose another --port, or 0 for any)\n"
    )


def test_a_bad_option_combination_is_refused_before_the_server_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_run(cfg: ServeConfig) -> int:
        raise AssertionError("the server must not start")

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    monkeypatch.delenv("GREENROOM_AUTH_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0", "--db", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("greenroom: ") and err.count("\n") == 1


def test_a_bad_agent_file_is_refused_before_the_server_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def fake_run(cfg: ServeConfig) -> int:
        raise AssertionError("the server must not start")

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [\n")
    assert main(["serve", str(bad), "--port", "0", "--db", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"greenroom: {bad}:2: ") and err.count("\n") == 1


def test_serve_reports_every_bad_agent_file_once(tmp_path: Path) -> None:
    """Issue 22: each fault printed once (not logged and printed), and every bad file of a
    directory reported, not only the first."""
    (tmp_path / "a.yaml").write_text(
        'version: "2"\nagents:\n  root:\n    model: echo/echo\n    bogus_key: 1\n'
    )
    (tmp_path / "b.yaml").write_text('version: "2"\nagents:\n  root:\n    instruction: [\n')
    (tmp_path / "c.yaml").write_text(
        'version: "2"\nagents:\n  root:\n    model: echo/echo\n    instruction: fine\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "greenroom.cli", "serve", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    err = done.stderr
    assert err.count("a.yaml:5: agents.root.bogus_key: unknown key") == 1, err
    assert err.count("b.yaml:") == 1, err
    assert "c.yaml" not in err


@pytest.mark.parametrize(
    ("flags", "env"),
    [(["--auth-token", ""], None), ([], ""), ([], "   "), (["--auth-token", " "], "good")],
)
def test_a_blank_token_exits_2_without_starting(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    env: str | None,
) -> None:
    """Issue 23: an empty --auth-token or GREENROOM_AUTH_TOKEN used to start without auth."""
    started: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        started.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    if env is None:
        monkeypatch.delenv("GREENROOM_AUTH_TOKEN", raising=False)
    else:
        monkeypatch.setenv("GREENROOM_AUTH_TOKEN", env)
    assert main(["serve", "--port", "0", *flags, "--log-level", "warning"]) == 2
    assert started == []
    assert "blank" in capsys.readouterr().err


def test_no_token_at_all_still_serves_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        started.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    monkeypatch.delenv("GREENROOM_AUTH_TOKEN", raising=False)
    assert main(["serve", "--port", "0", "--log-level", "warning"]) == 0
    assert started[0].auth_token == ""
    monkeypatch.setenv("GREENROOM_AUTH_TOKEN", "t0k")
    assert main(["serve", "--port", "0", "--log-level", "warning"]) == 0
    assert started[1].auth_token == "t0k"
