"""Agent sources from a URL and from an OCI registry, cached and refreshed, and sub-agents from
an agent catalog (issue 26, parts 6 and 8; decision 0034). Real servers on 127.0.0.1: the
fake web server / registry (with the anonymous token flow) of ``remote_fakes.py``, and
greenroom's own server for the end-to-end case."""

from __future__ import annotations

import io
import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from greenroom.agents import AgentSources
from greenroom.agents._remote_sources import RemoteSources
from greenroom.agents._source_refs import remote_ref
from greenroom.agents._validate import validate_main
from greenroom.agents.tools import EgressPolicy, parse_networks
from greenroom.errors import AgentConfigError, ConfigError
from greenroom.serve import ServeConfig, serve
from greenroom.serve._agents import open_sources
from greenroom.serve._run import run
from tests.slowness import slow

from .remote_fakes import FakeWeb, agent_yaml, fake_web

LOOPBACK = ("127.0.0.1/32",)  # the fake servers are on loopback (egress policy, decision 0021)


def config(tmp_path: Path, *agents: str, **changes: Any) -> ServeConfig:
    cfg = ServeConfig(
        agent_paths=agents, port=0, db=str(tmp_path / "db.sqlite3"),
        data_dir=str(tmp_path / "data"), graceful_timeout=1, allow_private_networks=LOOPBACK,
    )  # fmt: skip
    return attrs.evolve(cfg, **changes)


def host(web: FakeWeb) -> str:
    return web.url.removeprefix("http://")


async def test_serve_an_agent_from_a_url(tmp_path: Path) -> None:
    async with fake_web() as web:
        web.files["/agents/pirate.yaml"] = agent_yaml("piratey").encode()
        source = f"{web.url}/agents/pirate.yaml"
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve, config(tmp_path, source))
            async with httpx.AsyncClient(base_url=url, timeout=slow(10)) as client:
                rows = (await client.get("/api/agents")).json()
                created = await client.post("/api/sessions", json={})
                sid = created.json()["id"]
                run = await client.post(
                    f"/api/sessions/{sid}/agent/pirate",
                    json=[{"role": "user", "content": "ahoy"}],
                )
            nursery.cancel_scope.cancel()
    assert rows == [{"name": "pirate", "description": "piratey", "multi": False, "source": source}]
    assert run.status_code == 200 and "ahoy" in run.text  # the echo model answered
    cached = list((tmp_path / "data" / "agent-sources").glob("pirate-*.yaml"))
    assert [p.read_text() for p in cached] == [agent_yaml("piratey")]


async def test_serve_an_agent_from_an_oci_registry_with_an_anonymous_token(
    tmp_path: Path,
) -> None:
    async with fake_web() as web:
        web.push("team/coder", "v1", agent_yaml("coding"))
        sources, _, _ = await open_sources(config(tmp_path, f"oci://{host(web)}/team/coder:v1"))
    assert [e.to_json() for e in sources.list()] == [
        {
            "name": "coder",
            "description": "coding",
            "multi": False,
            "source": f"oci://{host(web)}/team/coder:v1",
        }
    ]
    assert web.token_scopes == ["repository:team/coder:pull"]
    assert "/token" in web.requests  # refused first, then asked with the token


async def test_a_first_fetch_that_fails_is_a_startup_error_naming_the_source(
    tmp_path: Path,
) -> None:
    async with fake_web() as web:
        source = f"{web.url}/agents/missing.yaml"
        with pytest.raises(ConfigError) as caught:
            await open_sources(config(tmp_path, source))
        missing_tag = f"{host(web)}/team/coder:v9"
        with pytest.raises(ConfigError) as oci:
            await open_sources(config(tmp_path, missing_tag))
    assert source in str(caught.value) and "HTTP 404" in str(caught.value)
    assert "no copy is cached yet" in str(caught.value)
    assert missing_tag in str(oci.value) and "not found in the registry" in str(oci.value)


async def test_a_loopback_source_needs_the_operator_to_allow_it(tmp_path: Path) -> None:
    async with fake_web() as web:
        web.files["/pirate.yaml"] = agent_yaml("piratey").encode()
        with pytest.raises(ConfigError) as caught:
            await open_sources(
                config(tmp_path, f"{web.url}/pirate.yaml", allow_private_networks=())
            )
    assert "loopback" in str(caught.value)
    assert web.requests == []  # refused before connecting


async def test_a_404_after_a_good_fetch_keeps_the_last_good_copy_and_says_so(
    tmp_path: Path,
) -> None:
    async with fake_web() as web:
        web.files["/pirate.yaml"] = agent_yaml("piratey").encode()
        cfg = config(tmp_path, f"{web.url}/pirate.yaml")
        await open_sources(cfg)
        del web.files["/pirate.yaml"]  # the server restarts; the source is gone
        sources, warnings, _ = await open_sources(cfg)  # the server prints the warnings
    (row,) = [e.to_json() for e in sources.list()]
    assert row["description"] == "piratey"
    assert "HTTP 404" in row["source_error"] and "last good copy" in row["source_error"]
    (warning,) = warnings
    assert warning.startswith(f"agent source 'pirate': cannot fetch {web.url}/pirate.yaml (")
    assert "HTTP 404" in warning and "serving the last good copy (cached " in warning


async def test_a_bad_file_at_the_source_keeps_the_last_good_copy(tmp_path: Path) -> None:
    async with fake_web() as web:
        web.files["/pirate.yaml"] = agent_yaml("piratey").encode()
        cfg = config(tmp_path, f"{web.url}/pirate.yaml")
        await open_sources(cfg)
        web.files["/pirate.yaml"] = b"agents: [not: a mapping"
        sources, _, _ = await open_sources(cfg)
    (row,) = [e.to_json() for e in sources.list()]
    assert row["description"] == "piratey"
    assert "not a valid agent file" in row["source_error"]


async def test_the_pull_interval_refreshes_in_the_background(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with fake_web() as web:
        web.files["/pirate.yaml"] = agent_yaml("piratey").encode()
        web.push("team/coder", "latest", agent_yaml("coding"))
        refs = [remote_ref(f"{web.url}/pirate.yaml"), remote_ref(f"{host(web)}/team/coder")]
        remote = RemoteSources(
            [r for r in refs if r is not None],
            tmp_path / "cache",
            EgressPolicy(parse_networks(LOOPBACK)),
            "",
        )
        await remote.start({})
        sources = AgentSources(remote.files(), external=remote.external)
        sources.origin_of = remote.row

        def descriptions() -> dict[str, str]:
            return {e.name: e.description for e in sources.list()}

        assert descriptions() == {"coder": "coding", "pirate": "piratey"}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(remote.refresh_forever, 300.0)
            web.files["/pirate.yaml"] = agent_yaml("salty").encode()
            web.push("team/coder", "latest", agent_yaml("careful"))
            await trio.sleep(299)  # virtual time (autojump clock)
            assert remote.rounds == 1 and descriptions()["pirate"] == "piratey"
            await remote.wait_rounds(2)
            assert trio.current_time() < 302  # one interval later
            assert descriptions() == {"coder": "careful", "pirate": "salty"}
            del web.files["/pirate.yaml"]
            with caplog.at_level(logging.WARNING):
                await remote.wait_rounds(3)
            nursery.cancel_scope.cancel()
    assert descriptions() == {"coder": "careful", "pirate": "salty"}  # the last good copy
    rows = {e.name: e.to_json() for e in sources.list()}
    assert "HTTP 404" in rows["pirate"]["source_error"]
    assert "source_error" not in rows["coder"]
    assert any("serving the last good copy" in r.getMessage() for r in caplog.records)


TEAM = """\
models:
  m:
    provider: echo
    model: echo
agents:
  root:
    model: m
    description: Coordinator
    sub_agents: [local_helper, agentcatalog/pirate]
  local_helper:
    model: m
    description: helps
"""


async def test_a_catalog_sub_agent_is_pulled_from_the_configured_catalog(
    tmp_path: Path,
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    async with fake_web() as web:
        web.push("catalog/pirate", "latest", agent_yaml("piratey"))
        cfg = config(tmp_path, str(team), agent_catalog=f"{host(web)}/catalog")
        sources, _, _ = await open_sources(cfg)
    file = sources.get("team")
    assert file.agent("root").sub_agents == ("local_helper", "agentcatalog/pirate")
    pirate = file.agent("agentcatalog/pirate")
    assert (pirate.description, pirate.instruction) == ("piratey", "Be piratey.")
    assert web.token_scopes == ["repository:catalog/pirate:pull"]


async def test_a_catalog_sub_agent_without_a_catalog_is_a_clear_error(tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    with pytest.raises(AgentConfigError) as caught:
        await open_sources(config(tmp_path, str(team), agent_catalog=""))
    (line,) = caught.value.problems
    assert line.startswith(f"{team}:9: agents.root.sub_agents[1]: agent 'agentcatalog/pirate'")
    assert "none is configured" in line and "--agent-catalog" in line


async def test_a_catalog_sub_agent_that_cannot_be_pulled_is_a_clear_error(
    tmp_path: Path,
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    async with fake_web() as web:  # an empty registry
        with pytest.raises(AgentConfigError) as caught:
            await open_sources(config(tmp_path, str(team), agent_catalog=f"{host(web)}/catalog"))
    (line,) = caught.value.problems
    assert line.startswith(f"{team}:9: agents.root.sub_agents[1]:")
    assert f"{host(web)}/catalog/pirate" in line and "not found in the registry" in line
    assert "--agent-catalog" in line


async def test_validate_fetches_urls_oci_references_and_catalog_sub_agents(
    tmp_path: Path,
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    async with fake_web() as web:
        web.files["/pirate.yaml"] = agent_yaml("piratey").encode()
        web.push("catalog/pirate", "latest", agent_yaml("piratey"))
        args = [
            str(team),
            f"{web.url}/pirate.yaml",
            f"{host(web)}/catalog/pirate",
            f"{web.url}/x.yaml",
        ]

        def validate(**options: Any) -> tuple[int, str]:
            out = io.StringIO()
            return validate_main(args, out=out, **options), out.getvalue()

        strict = await trio.to_thread.run_sync(validate)
        allowed = await trio.to_thread.run_sync(
            partial(validate, allow_private_networks=LOOPBACK, agent_catalog=f"{host(web)}/catalog")
        )
    code, text = strict
    assert code == 1
    assert "loopback" in text  # no --allow-private-network: refused
    assert "sub_agents[1]: warning: agent 'agentcatalog/pirate'" in text  # no catalog: warned
    code, text = allowed
    assert code == 1, text
    lines = text.splitlines()
    assert f"{team}: ok (3 agent(s))" in lines  # root, local_helper, agentcatalog/pirate
    assert f"{web.url}/pirate.yaml: ok (1 agent(s))" in lines
    assert f"{host(web)}/catalog/pirate: ok (1 agent(s))" in lines
    assert any(line.startswith(f"{web.url}/x.yaml: ") and "HTTP 404" in line for line in lines)
    assert lines[-1] == "4 files: 3 ok, 1 with errors"


async def test_serve_agentcatalog_name_pulls_from_the_configured_catalog(tmp_path: Path) -> None:
    async with fake_web() as web:
        web.push("catalog/pirate", "latest", agent_yaml("piratey"))
        cfg = config(tmp_path, "agentcatalog/pirate", agent_catalog=f"{host(web)}/catalog")
        sources, _, _ = await open_sources(cfg)
    (row,) = [e.to_json() for e in sources.list()]
    assert row["name"] == "pirate" and row["source"] == f"{host(web)}/catalog/pirate"


async def test_an_artifact_that_is_not_an_agent_is_refused(tmp_path: Path) -> None:
    async with fake_web() as web:
        web.push("team/image", "v1", agent_yaml("image"))
        manifest = json.loads(web.manifests[("team/image", "v1")])
        manifest["artifactType"] = "application/vnd.oci.image.config.v1+json"
        manifest["config"]["mediaType"] = "application/vnd.oci.image.config.v1+json"
        del manifest["annotations"]
        web.manifests[("team/image", "v1")] = json.dumps(manifest).encode()
        with pytest.raises(ConfigError) as caught:
            await open_sources(config(tmp_path, f"{host(web)}/team/image:v1"))
    assert "not an agent artifact" in str(caught.value)


async def test_a_layer_that_does_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    async with fake_web() as web:
        web.push("team/coder", "v1", agent_yaml("coding"))
        (layer,) = json.loads(web.manifests[("team/coder", "v1")])["layers"]
        web.blobs[layer["digest"]] = agent_yaml("tampered").encode()
        with pytest.raises(ConfigError) as caught:
            await open_sources(config(tmp_path, f"{host(web)}/team/coder:v1"))
    assert "does not match its digest" in str(caught.value)


async def test_a_token_realm_the_egress_policy_refuses_is_not_asked(tmp_path: Path) -> None:
    async with fake_web() as web:
        web.push("team/coder", "v1", agent_yaml("coding"))
        web.realm = "http://169.254.169.254/latest/meta-data/token"  # the metadata service
        with pytest.raises(ConfigError) as caught:
            await open_sources(config(tmp_path, f"{host(web)}/team/coder:v1"))
    assert "169.254.169.254 is a link-local address" in str(caught.value)
    assert web.token_scopes == []


async def test_serve_exits_2_naming_a_source_it_cannot_fetch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with fake_web() as web:
        source = f"{web.url}/gone.yaml"
        code = await trio.to_thread.run_sync(run, config(tmp_path, source))
    assert code == 2
    err = capsys.readouterr().err
    assert f"greenroom: agent source {source} cannot be fetched: GET {source}: HTTP 404" in err
    assert "no copy is cached yet" in err


async def test_serve_refreshes_every_pull_interval(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with fake_web() as web:
        web.files["/pirate.yaml"] = agent_yaml("piratey").encode()
        cfg = config(tmp_path, f"{web.url}/pirate.yaml", db=":memory:", pull_interval=60.0)
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve, cfg)
            async with httpx.AsyncClient(base_url=url) as client:

                async def description() -> str:
                    (row,) = (await client.get("/api/agents")).json()
                    return str(row["description"])

                assert await description() == "piratey"
                web.files["/pirate.yaml"] = agent_yaml("salty").encode()
                started = trio.current_time()
                for _ in range(120):  # virtual seconds
                    await trio.sleep(1)  # virtual time (autojump clock)
                    if await description() == "salty":
                        break
                waited = trio.current_time() - started
                nursery.cancel_scope.cancel()
    assert 59 <= waited <= 62  # one --pull-interval


async def test_a_team_transfers_a_task_to_a_catalog_sub_agent(tmp_path: Path) -> None:
    """End to end: the root agent (scripted) transfers to ``agentcatalog/pirate``, pulled from
    the fake registry; the pirate (the echo model) answers in its sub-session."""
    transfer = {
        "tool_call": {
            "name": "transfer_task",
            "id": "t1",
            "arguments": {
                "agent": "agentcatalog/pirate",
                "task": "Say ahoy",
                "expected_output": "a line",
            },
        }
    }
    (tmp_path / "root.json").write_text(json.dumps({"turns": [[transfer], "Done."]}))
    team = tmp_path / "team.yaml"
    team.write_text(
        "agents:\n  root:\n    model: scripted/root.json\n    sub_agents: [agentcatalog/pirate]\n"
    )
    async with fake_web() as web:
        web.push("catalog/pirate", "latest", agent_yaml("piratey"))
        cfg = config(tmp_path, str(team), agent_catalog=f"{host(web)}/catalog")
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve, cfg)
            async with httpx.AsyncClient(base_url=url, timeout=slow(20)) as client:
                body = {"title": "team", "working_dir": str(tmp_path)}
                sid = (await client.post("/api/sessions", json=body)).json()["id"]
                run = await client.post(
                    f"/api/sessions/{sid}/agent/team",
                    json=[{"role": "user", "content": "Go"}],
                )
            nursery.cancel_scope.cancel()
    events = [json.loads(line[6:]) for line in run.text.splitlines() if line.startswith("data: ")]
    (answer,) = [e for e in events if e["type"] == "tool_call_response"]
    assert answer["tool_call_id"] == "t1", answer
    assert answer["response"] == "Echo: Please proceed.", answer  # the pirate's echo model
    switches = [e for e in events if e["type"] == "agent_switching"]
    assert any(e.get("to_agent") == "agentcatalog/pirate" for e in switches), switches


async def test_the_server_modes_take_a_url_too(tmp_path: Path) -> None:
    from greenroom.serve._host import open_host

    async with fake_web() as web:
        web.files["/pirate.yaml"] = agent_yaml("piratey").encode()
        cfg = config(tmp_path, f"{web.url}/pirate.yaml", db=":memory:")
        async with open_host(cfg) as host_:
            assert host_.sources.keys() == ["pirate"]
