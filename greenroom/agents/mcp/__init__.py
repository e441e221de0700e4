"""MCP servers as toolsets: local (stdio), remote (streamable HTTP, SSE), Docker catalog refs;
OAuth for remote servers; and the ``mcp`` toolset builder (``_toolset.py``).

This package uses only the tool contract of ``tools/`` (``_base``, ``_expand``, ``_registry``).
"""

from ._content import McpTool as McpTool, result_of as result_of, tool_of as tool_of
from ._oauth import FileTokenStorage as FileTokenStorage, token_path as token_path
from ._server import BACKOFF as BACKOFF, McpServer as McpServer
from ._spec import (
    DockerSpec as DockerSpec,
    RemoteSpec as RemoteSpec,
    ServerSpec as ServerSpec,
    StdioSpec as StdioSpec,
    gateway_argv as gateway_argv,
    server_spec as server_spec,
)
from ._stdio import MAX_LINE as MAX_LINE
from ._toolset import mcp_toolset as mcp_toolset
