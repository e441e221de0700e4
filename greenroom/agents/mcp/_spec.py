"""What an ``mcp`` toolset's options say about its server (spec §5.1, §5.2).

Exactly one of ``command`` (a local server over stdio), ``remote.url`` (streamable HTTP or the
older SSE transport) or ``ref: docker:NAME`` (a server of Docker's MCP catalog, run through
Docker's MCP gateway). A top-level ``mcps:`` entry named by ``ref`` has already been merged into
the options by the agent-file parser.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

import attrs

from ..tools._base import ToolContext, ToolsetError
from ..tools._environment import scrubbed
from ..tools._expand import expand, expand_env

TRANSPORTS = {"streamable": "streamable", "streamable-http": "streamable", "sse": "sse", "": ""}
MCP_CATALOG_URL = "https://desktop.docker.com/mcp/catalog/v3/catalog.yaml"
"""The catalog docker-agent hands to Docker's MCP gateway."""


@attrs.frozen
class StdioSpec:
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: Path = attrs.field(factory=Path.cwd)

    @property
    def description(self) -> str:
        if self.args:
            return f"mcp(stdio cmd={self.command} args_len={len(self.args)})"
        return f"mcp(stdio cmd={self.command})"


@attrs.frozen
class RemoteSpec:
    url: str
    transport: str = "streamable"  # or "sse"
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def description(self) -> str:
        host = urllib.parse.urlsplit(self.url).netloc
        return f"mcp(remote host={host} transport={self.transport})"


@attrs.frozen
class DockerSpec:
    """A catalog server: ``docker mcp gateway run --servers NAME`` over stdio."""

    server: str
    config: Any = None  # handed to the gateway as {server: config}
    secrets: Mapping[str, str] = attrs.field(factory=dict)  # the toolset's env, as secrets
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: Path = attrs.field(factory=Path.cwd)

    @property
    def description(self) -> str:
        return f"mcp(ref={self.server})"


ServerSpec: TypeAlias = StdioSpec | RemoteSpec | DockerSpec


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, str | int | float) for v in value
    ):
        raise ToolsetError(f"{what} must be a list of strings")
    return tuple(str(v) for v in value)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ToolsetError(f"{what} must be a mapping")
    return value


def server_spec(options: Mapping[str, Any], ctx: ToolContext) -> ServerSpec:
    """The server an ``mcp`` toolset's options describe.

    Raises:
        ToolsetError: not exactly one of command / remote.url / ref, or a malformed value.
    """
    command = options.get("command")
    remote = _mapping(options.get("remote"), "remote")
    url = remote.get("url")
    ref = options.get("ref")
    given = [k for k, v in (("command", command), ("remote.url", url), ("ref", ref)) if v]
    if len(given) != 1:
        raise ToolsetError(
            "an mcp toolset needs exactly one of command, remote.url or ref"
            + (f" (got {', '.join(given)})" if given else "")
        )
    raw_env = _mapping(options.get("env"), "env")
    own_env = {str(k): expand_env(str(v), ctx.env) for k, v in raw_env.items()}
    # A local server is a tool process: it starts without the server's secrets (issue 23)
    # unless the toolset's env passes them.
    env = {**scrubbed(ctx.env, ctx.secret_env), **own_env}
    if command:
        if not isinstance(command, str):
            raise ToolsetError("command must be a string")
        args = _strings(options.get("args"), "args")
        return StdioSpec(command, args, env, Path(ctx.working_dir))
    if url:
        values = {"env": dict(ctx.env)}
        if not isinstance(url, str):
            raise ToolsetError("remote.url must be a string")
        transport = str(remote.get("transport_type") or "")
        if transport not in TRANSPORTS:
            raise ToolsetError(f"unsupported transport type: {transport}")
        headers = {
            str(k): expand(str(v), values)
            for k, v in _mapping(remote.get("headers"), "remote.headers").items()
        }
        expanded = expand(url, values)
        scheme = urllib.parse.urlsplit(expanded).scheme
        if scheme not in ("http", "https"):
            raise ToolsetError(f"remote.url must be an http or https URL, got {expanded!r}")
        return RemoteSpec(expanded, TRANSPORTS[transport] or "streamable", headers)
    if not isinstance(ref, str) or not ref.startswith("docker:") or ref == "docker:":
        raise ToolsetError(f"ref must be docker:<server> or the name of an mcps entry, got {ref!r}")
    return DockerSpec(
        ref.removeprefix("docker:"), options.get("config"), own_env, env, Path(ctx.working_dir)
    )


def gateway_argv(
    spec: DockerSpec, *, docker: str, secrets_file: str = "", config_file: str = ""
) -> list[str]:
    """The command docker-agent runs for ``ref: docker:<server>``: Docker's MCP gateway for
    that one catalog server, its secrets and the toolset's ``config`` handed over in files."""
    argv = [docker, "mcp", "gateway", "run", "--servers", spec.server, "--catalog", MCP_CATALOG_URL]
    if secrets_file:
        argv += ["--secrets", secrets_file]
    if config_file:
        argv += ["--config", config_file]
    return argv


def gateway_config(spec: DockerSpec) -> str:
    """The gateway's ``--config`` file content: ``{server: config}`` (JSON is valid YAML)."""
    return json.dumps({spec.server: spec.config})


def gateway_secrets(spec: DockerSpec) -> str:
    """The gateway's ``--secrets`` file content: ``NAME=value`` lines."""
    return "".join(f"{k}={v}\n" for k, v in spec.secrets.items())
