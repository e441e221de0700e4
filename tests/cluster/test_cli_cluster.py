"""The cluster flags of ``greenroom serve`` and ``greenroom nodes``: parsed, validated with
the flag named, refused without PostgreSQL; the startup summary and ``nodes`` output."""

from __future__ import annotations

import json

import pytest

import greenroom.serve
from greenroom.agents import AgentSources
from greenroom.cli import main
from greenroom.cluster import node_json, nodes_table, redact_dsn
from greenroom.errors import ConfigError
from greenroom.persistence import NodeInfo
from greenroom.serve import ServeConfig, check_config, startup_summary

PG = "postgresql://greenroom:secret@db.internal/greenroom"


def parsed(monkeypatch: pytest.MonkeyPatch, *flags: str) -> ServeConfig:
    seen: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    assert main(["serve", *flags, "--log-level", "warning"]) == 0
    return seen[0]


def test_flags_and_environment_reach_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENROOM_DB", PG)
    monkeypatch.setenv("GREENROOM_NODE_ID", "from-env")
    cfg = parsed(
        monkeypatch,
        "--advertise-url",
        "http://10.0.0.2:8080",
        "--lease-ttl",
        "6",
        "--lease-renew",
        "1.5",
    )
    assert (cfg.db, cfg.node_id, cfg.advertise_url) == (PG, "from-env", "http://10.0.0.2:8080")
    assert (cfg.lease_ttl, cfg.lease_renew, cfg.cluster) == (6.0, 1.5, True)
    check_config(cfg)
    cfg = parsed(monkeypatch, "--node-id", "flag-wins")
    assert cfg.node_id == "flag-wins"


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"node_id": "no spaces"}, "--node-id"),
        ({"advertise_url": "10.0.0.2:8080"}, "--advertise-url"),
        ({"advertise_url": "http://a:1/path"}, "--advertise-url"),
        ({"lease_ttl": 0.0}, "--lease-ttl"),
        ({"lease_renew": 6.0}, "--lease-renew"),
        ({"lease_renew": -1.0}, "--lease-renew"),
        ({"host": "0.0.0.0", "auth_token": "t"}, "--advertise-url"),
        ({"drain_timeout": -1.0}, "--drain-timeout"),
    ],
)
def test_bad_cluster_flags_are_refused_by_name(changes: dict[str, object], named: str) -> None:
    cfg = ServeConfig(db=PG, **changes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=named):
        check_config(cfg)


@pytest.mark.parametrize("db", ["", ":memory:", "/tmp/sessions.sqlite3"])
def test_cluster_flags_need_postgresql(db: str) -> None:
    with pytest.raises(ConfigError, match="--node-id, --lease-ttl need --db postgresql"):
        check_config(ServeConfig(db=db, node_id="a", lease_ttl=5.0))
    check_config(ServeConfig(db=db))


def test_drain_timeout_defaults_to_30_s_on_a_cluster_and_0_on_one_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ServeConfig(db=PG).drain_seconds == 30.0
    assert ServeConfig(db=":memory:").drain_seconds == 0.0
    assert ServeConfig(db=":memory:", drain_timeout=5.0).drain_seconds == 5.0
    assert parsed(monkeypatch, "--db", PG, "--drain-timeout", "0").drain_seconds == 0.0


def test_serve_reports_a_flag_error_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--db", ":memory:", "--advertise-url", "http://a:1"]) == 2
    assert "--advertise-url need --db postgresql" in capsys.readouterr().err


def test_nodes_needs_postgresql(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "--db", ":memory:"]) == 2
    assert "nodes needs --db postgresql" in capsys.readouterr().err


def test_startup_summary_names_the_node_and_hides_the_password() -> None:
    cfg = ServeConfig(db=PG, node_id="a", advertise_url="http://10.0.0.2:8080", lease_ttl=6)
    lines = startup_summary(cfg, AgentSources.bundled(), None, ("a", 3))
    text = "\n".join(lines)
    assert "secret" not in text and redact_dsn(PG) in text
    assert "node:     a incarnation 3, lease 6 s, reached at http://10.0.0.2:8080" in lines


def test_nodes_table_and_json() -> None:
    nodes = [
        NodeInfo("b", 2, "http://b:8080", "up", -4.0),
        NodeInfo("a", 5, "http://a:8080", "up", 7.25, ("s1", "s2")),
    ]
    lines = nodes_table(nodes)
    assert lines[0].startswith("a  incarnation 5  up  lease 7.2 s left  http://a:8080  2")
    assert lines[1:3] == ["    s1", "    s2"]
    assert "expired" in lines[3] and "4.0 s ago" in lines[3]
    out = json.loads(json.dumps([node_json(n) for n in nodes]))
    assert out[0]["state"] == "expired" and out[1]["sessions"] == ["s1", "s2"]
