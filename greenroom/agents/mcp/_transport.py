"""The connection to one MCP server: its transport streams, and what goes wrong on the way.

:func:`open_transport` opens the read and write streams the SDK's ``ClientSession`` runs on: our
bounded stdio transport for a local server (``_stdio.py``) or a Docker catalog server (through
Docker's MCP gateway, with its secrets and config in private temporary files), the SDK's
streamable-HTTP or SSE client for a remote one. :class:`Watched` reports the end of a read
stream (the server went away). The supervisor that uses them is :class:`~._server.McpServer`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx2
import trio
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from greenroom.observe import inject_request_hook

from ..tools._base import McpSettings
from ..tools._egress import guarded_httpx2_client
from ._spec import (
    DockerSpec,
    RemoteSpec,
    ServerSpec,
    StdioSpec,
    gateway_argv,
    gateway_config,
    gateway_secrets,
)
from ._stdio import open_stdio, spawn

DOCKER_PROBE_TIMEOUT = 10.0

AuthFor = Callable[[str], httpx2.Auth | None]
"""The OAuth provider for a remote server's URL (None: no OAuth)."""


class StartFailed(Exception):
    """A start attempt failed; the message says why (for the warning)."""


def reason(exc: BaseException) -> str:
    """A one-line reason from an exception (or the first of a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@attrs.define(eq=False)
class Watched:
    """The read stream of a connection, reporting its end (the server went away)."""

    inner: Any
    ended: trio.Event

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self.inner.receive()
        except BaseException:
            self.ended.set()
            raise
        return item

    async def aclose(self) -> None:
        self.ended.set()
        await self.inner.aclose()

    def __aiter__(self) -> Watched:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Watched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def docker_available(docker: str) -> str:
    """ "" when ``docker mcp`` works here, else why not."""
    path = shutil.which(docker)
    if path is None:
        return f"no {docker} CLI on PATH"
    try:
        with trio.move_on_after(DOCKER_PROBE_TIMEOUT) as scope:
            done = await trio.run_process(
                [path, "mcp", "version"], capture_stdout=True, capture_stderr=True, check=False
            )
    except OSError as exc:
        return f"{path} mcp version failed: {exc}"
    if scope.cancelled_caught:
        return f"{path} mcp version did not answer within {DOCKER_PROBE_TIMEOUT:g} seconds"
    if done.returncode != 0:
        return f"{path} has no working mcp plugin (`docker mcp version` exited {done.returncode})"
    return ""


@asynccontextmanager
async def open_transport(
    spec: ServerSpec,
    settings: McpSettings,
    *,
    auth: AuthFor,
    on_stderr: Callable[[str], None],
) -> AsyncIterator[tuple[Any, Any]]:
    """The read and write streams to the server of ``spec``; ``on_stderr`` gets the stderr tail
    of a local server when its streams close. Raises StartFailed (or what the transport
    raises) when the server cannot be reached."""
    if isinstance(spec, StdioSpec):
        stdio = _stdio(spec.command, spec.args, spec.env, spec.cwd, settings, on_stderr)
        async with stdio as streams:
            yield streams
    elif isinstance(spec, DockerSpec):
        async with _docker(spec, settings, on_stderr) as streams:
            yield streams
    else:
        async with _remote(spec, auth, settings) as streams:
            yield streams


@asynccontextmanager
async def _stdio(
    command: str,
    args: tuple[str, ...] | list[str],
    env: Mapping[str, str],
    cwd: Path,
    settings: McpSettings,
    on_stderr: Callable[[str], None],
) -> AsyncIterator[tuple[Any, Any]]:
    try:
        process = await spawn(command, list(args), env=env, cwd=cwd)
    except OSError as exc:
        raise StartFailed(f"cannot start {command}: {exc.strerror or exc}") from None
    async with open_stdio(process, max_line=settings.max_line) as channel:
        try:
            yield channel.read, channel.write
        finally:
            on_stderr(channel.stderr_tail())


@asynccontextmanager
async def _docker(
    spec: DockerSpec, settings: McpSettings, on_stderr: Callable[[str], None]
) -> AsyncIterator[tuple[Any, Any]]:
    docker = settings.docker
    problem = await docker_available(docker)
    if problem:
        raise StartFailed(
            f"catalog server {spec.server!r} needs Docker's MCP gateway ({problem}): install "
            "Docker Desktop, or the docker CLI with its MCP Toolkit plugin, so that "
            "`docker mcp` runs"
        )
    with tempfile.TemporaryDirectory(prefix="greenroom-mcp-") as temp:
        secrets = config = ""
        if spec.secrets:
            secrets = os.path.join(temp, "secrets.env")
            _private_file(secrets, gateway_secrets(spec))
        if spec.config is not None:
            config = os.path.join(temp, "config.yaml")
            _private_file(config, gateway_config(spec))
        argv = gateway_argv(spec, docker=docker, secrets_file=secrets, config_file=config)
        async with _stdio(argv[0], argv[1:], spec.env, spec.cwd, settings, on_stderr) as streams:
            yield streams


@asynccontextmanager
async def _remote(
    spec: RemoteSpec, auth_for: AuthFor, settings: McpSettings
) -> AsyncIterator[tuple[Any, Any]]:
    """A remote server, every connection under the toolset's egress policy (``_egress``)."""
    auth = auth_for(spec.url)
    policy = settings.egress

    def guarded(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return guarded_httpx2_client(  # type: ignore[no-any-return]
            policy,
            headers=headers,
            timeout=timeout or httpx2.Timeout(30.0, read=300.0),
            auth=auth,
            event_hooks={"request": [inject_request_hook]},  # traceparent (decision 0025)
        )

    if spec.transport == "sse":
        async with sse_client(
            spec.url, headers=dict(spec.headers), auth=auth, httpx_client_factory=guarded
        ) as streams:
            yield streams
        return
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        guarded(headers=dict(spec.headers), auth=auth, timeout=timeout) as client,
        streamable_http_client(spec.url, http_client=client) as streams,
    ):
        yield streams


def _private_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
