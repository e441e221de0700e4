"""``lsp``: docker-agent's code-intelligence tools, answered by language servers.

Options: ``command`` (required), ``args``, ``env`` (``${env.X}`` expanded; added to the
scrubbed environment of tool processes), ``file_types`` (extensions the server handles; empty:
all), and greenroom's ``timeout`` (seconds a request may take). ``version`` (docker-agent's
auto-install) is not applied: the command must be on ``PATH``.

Each toolset runs one server (``_lsp_server.py``); the calls are in ``_lsp_calls.py``. An agent
with several ``lsp`` toolsets sees one set of ``lsp_*`` tools, as upstream: a call goes to the
first server whose ``file_types`` take its ``file``; ``lsp_workspace`` and
``lsp_workspace_symbols`` ask every server and join the answers (:meth:`LspTool.joined`, used by
the registry when a second toolset offers a tool of the same name).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import Tool, ToolAnnotations, ToolContext, ToolResult, ToolsetError, error
from ._environment import scrubbed
from ._expand import expand_env
from ._lsp_calls import LspCalls
from ._lsp_server import LspServer, LspSpec
from ._lsp_specs import DEFS, INSTRUCTIONS
from ._registry import Toolset, register

DIAGNOSTICS_WAIT = 5.0
"""Seconds lsp_diagnostics waits for the server to publish after sending it a file."""
BROADCAST = frozenset({"lsp_workspace", "lsp_workspace_symbols"})


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, str | int | float) for v in value
    ):
        raise ToolsetError(f"{what} must be a list of strings")
    return tuple(str(v) for v in value)


def lsp_spec(options: Mapping[str, Any], ctx: ToolContext) -> LspSpec:
    """The server an ``lsp`` toolset's options describe. Raises ToolsetError."""
    command = options.get("command")
    if not command:
        raise ToolsetError("lsp toolset requires a command to be set")
    if not isinstance(command, str):
        raise ToolsetError("command must be a string")
    raw_env = options.get("env") or {}
    if not isinstance(raw_env, Mapping):
        raise ToolsetError("env must be a mapping of strings")
    own = {str(k): expand_env(str(v), ctx.env) for k, v in raw_env.items()}
    file_types = tuple(
        t.lower() if t.startswith(".") else "." + t.lower()
        for t in _strings(options.get("file_types"), "file_types")
    )
    timeout = options.get("timeout")
    call_timeout = ctx.mcp.call_timeout
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ToolsetError("timeout must be a positive number of seconds")
        call_timeout = float(timeout)
    return LspSpec(
        command=command,
        args=_strings(options.get("args"), "args"),
        env={**scrubbed(ctx.env, ctx.secret_env), **own},
        working_dir=Path(os.path.realpath(ctx.working_dir)),
        file_types=file_types,
        start_timeout=ctx.mcp.start_timeout,
        call_timeout=call_timeout,
        diagnostics_wait=min(DIAGNOSTICS_WAIT, call_timeout),
    )


@register("lsp")
def lsp_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    server = LspServer(lsp_spec(config.options, ctx), ctx.host, ctx.processes)
    return Toolset(lsp_tools(server), INSTRUCTIONS, close=server.close)


@attrs.frozen
class LspTool:
    """One ``lsp_*`` tool over one or more servers (see the module docstring)."""

    spec: ToolSpec
    annotations: ToolAnnotations
    backends: tuple[LspCalls, ...]
    category: str = "lsp"

    def joined(self, other: Tool) -> LspTool:
        """This tool answered by ``other``'s servers too (they come after this one's)."""
        if not isinstance(other, LspTool):
            return self
        more = tuple(b for b in other.backends if b not in self.backends)
        return attrs.evolve(self, backends=self.backends + more)

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        name = self.spec.name
        if len(self.backends) == 1:
            return await self._on(self.backends[0], arguments)
        if name in BROADCAST:
            parts = []
            for backend in self.backends:
                result = await self._on(backend, arguments)
                prefix = f"[{backend.server.spec.description}] Error: " if result.is_error else ""
                parts.append(prefix + result.output)
            return ToolResult("\n---\n".join(parts))
        file = arguments.get("file")
        if not isinstance(file, str) or not file:
            return error("file is required")
        for backend in self.backends:
            if backend.server.spec.handles(Path(file)):
                return await self._on(backend, arguments)
        return error(f"no LSP server configured for file: {file}")

    async def _on(self, backend: LspCalls, arguments: Mapping[str, Any]) -> ToolResult:
        method = getattr(backend, self.spec.name.removeprefix("lsp_"))
        result: ToolResult = await method(arguments)
        return result


def lsp_tools(server: LspServer) -> list[Tool]:
    """The fifteen ``lsp_*`` tools of ``server``."""
    calls = LspCalls(server)
    return [
        LspTool(d.spec, ToolAnnotations(title=d.title, read_only=d.read_only), (calls,))
        for d in DEFS
    ]
