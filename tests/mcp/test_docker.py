"""Catalog servers (``ref: docker:NAME``) start through Docker's MCP gateway; here a fake
``docker`` executable plays the CLI: ``docker mcp version`` answers, ``docker mcp gateway run``
records what it was given and runs the test server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import pytest
import trio

from greenroom.agents import ToolContext
from greenroom.agents.mcp import McpServer, server_spec
from tests.mcp.support import QUICK, SERVER, FakeHost
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)

FAKE_DOCKER = """\
#!{python}
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["mcp", "version"]:
    sys.exit({version_exit})
if args[:3] == ["mcp", "gateway", "run"]:
    files = {{}}
    for flag in ("--secrets", "--config"):
        if flag in args:
            path = args[args.index(flag) + 1]
            files[flag] = [open(path).read(), oct(os.stat(path).st_mode & 0o777)]
    with open({record!r}, "a") as f:
        f.write(json.dumps({{"argv": args, "files": files}}) + "\\n")
    os.execv({python!r}, [{python!r}, {server!r}])
sys.exit(2)
"""


def fake_docker(tmp_path: Path, *, version_exit: int = 0) -> tuple[Path, Path]:
    record = tmp_path / "docker.jsonl"
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(
        FAKE_DOCKER.format(
            python=sys.executable, version_exit=version_exit, record=str(record), server=str(SERVER)
        )
    )
    docker.chmod(0o755)
    return docker, record


async def test_a_catalog_server_runs_through_the_gateway(tmp_path: Path) -> None:
    docker, record = fake_docker(tmp_path)
    ctx = ToolContext(working_dir=tmp_path, env={"API_KEY_SOURCE": "k-123"})
    options = {
        "ref": "docker:duckduckgo",
        "config": {"region": "eu"},
        "env": {"API_KEY": "${env.API_KEY_SOURCE}"},
    }
    spec = server_spec(options, ctx)
    assert spec.description == "mcp(ref=duckduckgo)"
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = McpServer(spec, FakeHost(nursery), attrs.evolve(QUICK, docker=str(docker)))
            assert await server.ensure_started() == ""
            assert (await server.call("echo", {"text": "duck"})).output == "echo: duck"
            nursery.cancel_scope.cancel()
    (run,) = [json.loads(line) for line in record.read_text().splitlines()]
    argv = run["argv"]
    assert argv[:5] == ["mcp", "gateway", "run", "--servers", "duckduckgo"]
    assert argv[argv.index("--catalog") + 1].startswith("https://desktop.docker.com/mcp/catalog")
    assert run["files"]["--secrets"] == ["API_KEY=k-123\n", "0o600"]
    assert json.loads(run["files"]["--config"][0]) == {"duckduckgo": {"region": "eu"}}
    secrets = argv[argv.index("--secrets") + 1]
    assert not await trio.Path(secrets).exists()  # the temporary files go with the server


@pytest.mark.parametrize("missing", ["no CLI", "no plugin"])
async def test_without_docker_mcp_the_server_fails_with_a_clear_warning(
    tmp_path: Path, missing: str
) -> None:
    docker = str(tmp_path / "nowhere" / "docker")
    if missing == "no plugin":
        docker = str(fake_docker(tmp_path, version_exit=1)[0])
    spec = server_spec({"ref": "docker:github"}, ToolContext(working_dir=tmp_path))
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = McpServer(spec, FakeHost(nursery), attrs.evolve(QUICK, docker=docker))
            warning = await server.ensure_started()
            nursery.cancel_scope.cancel()
    assert warning.startswith(
        "mcp(ref=github) start failed: catalog server 'github' needs Docker's MCP gateway ("
    )
    assert "install Docker Desktop" in warning
    if missing == "no CLI":
        assert f"no {docker} CLI on PATH" in warning
    else:
        assert "has no working mcp plugin" in warning
