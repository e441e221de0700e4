"""``greenroom serve a2a``'s command line (decision 0035): its own parser, reached through
``greenroom serve a2a``, with docker-agent's ``--listen`` beside ``--host``/``--port``. The
command itself runs in tests/transport/test_a2a_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenroom.cli import main
from greenroom.serve._a2a_cli import DEFAULT_PORT, build_a2a_parser


def test_defaults_and_flags() -> None:
    args = build_a2a_parser().parse_args(["agent.yaml"])
    assert (args.agent_file, args.agent, args.host, args.port) == (
        "agent.yaml",
        "",
        "127.0.0.1",
        DEFAULT_PORT,
    )
    args = build_a2a_parser().parse_args(["a.yaml", "-a", "reviewer", "--port", "0"])
    assert (args.agent, args.port) == ("reviewer", 0)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("127.0.0.1:9090", ("127.0.0.1", 9090)),
        ("[::1]:0", ("::1", 0)),
        (":9000", ("127.0.0.1", 9000)),
    ],
)
def test_listen_is_host_and_port(given: str, expected: tuple[str, int]) -> None:
    assert build_a2a_parser().parse_args(["a.yaml", "--listen", given]).listen == expected


@pytest.mark.parametrize("bad", [["a.yaml", "--listen", "9090"], ["a.yaml", "--port", "70000"], []])
def test_bad_input_is_one_line_and_exit_2(
    bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "a2a", *bad])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("greenroom serve a2a: error:") and len(err.splitlines()) == 1


def test_a_missing_file_is_refused_before_the_server_loads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "a2a", "/nonexistent/agent.yaml", "--port", "0", "--db", ":memory:"]) == 2
    assert "no such agent file" in capsys.readouterr().err


def test_a_cluster_database_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = tmp_path / "helper.yaml"
    agent.write_text("agents:\n  root:\n    model: echo/echo\n")
    db = "postgresql://postgres@127.0.0.1:5432/none"
    assert main(["serve", "a2a", str(agent), "--port", "0", "--db", db]) == 2
    assert "keeps its sessions in SQLite" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("bound", "card"),
    [
        ("http://0.0.0.0:8082", "http://localhost:8082"),
        ("http://[::]:8082", "http://localhost:8082"),
        ("http://127.0.0.1:8082", "http://127.0.0.1:8082"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("http://192.168.1.5:9000", "http://192.168.1.5:9000"),
    ],
)
def test_the_card_names_a_routable_address(bound: str, card: str) -> None:
    from greenroom.serve._a2a import routable

    assert routable(bound) == card
