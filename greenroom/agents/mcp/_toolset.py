"""``mcp``: the tools of an MCP server (spec §5). The server runs as a service of the runtime
(:class:`McpServer`); its tools are read again between turns when the server changed them.
The builder is registered in ``TOOLSET_BUILDERS`` with the built-in toolsets (``tools/__init__``
imports this package).

Options: ``command``/``args``/``env`` (local), ``remote: {url, transport_type, headers}``,
``ref: docker:NAME`` (exactly one of the three), ``name`` (tool-name prefix), ``config``
(Docker catalog servers), and greenroom's ``timeout`` (seconds per call).
"""

from __future__ import annotations

import attrs

from .._config import ToolsetConfig
from ..tools._base import ToolContext, ToolsetError
from ..tools._egress import toolset_policy
from ..tools._registry import Toolset, register
from ._server import McpServer
from ._spec import server_spec


@register("mcp")
def mcp_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    spec = server_spec(config.options, ctx)
    prefix = config.options.get("name") or ""
    if not isinstance(prefix, str):
        raise ToolsetError("name must be a string")
    try:
        egress = toolset_policy(config.options, ctx.egress)
    except ValueError as exc:
        raise ToolsetError(str(exc)) from None
    settings = attrs.evolve(ctx.mcp, egress=egress)
    timeout = config.options.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ToolsetError("timeout must be a positive number of seconds")
        settings = attrs.evolve(settings, call_timeout=float(timeout))
    server = McpServer(spec, ctx.host, settings, prefix=prefix, data_dir=ctx.data_dir)
    return Toolset([], live=server)
