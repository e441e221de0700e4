"""Remote MCP servers for the tests, written with the SDK's server side and served in-process by
hypercorn on 127.0.0.1 (a socket bound first, so the app knows its own URL): streamable HTTP,
the older SSE transport, and one that requires OAuth with a tiny authorization server of its
own (the SDK's authorization routes over :class:`AutoApprove`, which grants every request).
"""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, cast

import hypercorn.trio
import trio
from hypercorn.config import Config
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.sse import SseServerTransport
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_types import ToolAnnotations
from pydantic import AnyHttpUrl, BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

App = Callable[[Scope, Receive, Send], Any]


def tools_server(name: str = "remote", **options: Any) -> MCPServer:
    """An MCP server with ``echo`` (read-only), ``whoami`` and ``ask`` (elicits)."""
    server: MCPServer = MCPServer(
        name, instructions=f"{name} instructions", log_level="ERROR", **options
    )

    @server.tool(description="Echo the text back", annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        return f"{name}: {text}"

    @server.tool(description="The request's headers as the server saw them")
    def headers(ctx: Context) -> str:
        seen = ctx.headers or {}
        return ",".join(f"{k}={v}" for k, v in sorted(seen.items()) if k.startswith("x-"))

    class Name(BaseModel):
        name: str

    @server.tool(description="Ask the user for their name")
    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit("What is your name?", Name)
        data = getattr(answer, "data", None)
        return f"{answer.action}: {data.name if data is not None else ''}"

    return server


@asynccontextmanager
async def serving(make_app: Callable[[str], App]) -> AsyncIterator[str]:
    """Serve ``make_app(url)`` on 127.0.0.1 (a free port); yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) it from here
    config.accesslog = None
    config.graceful_timeout = 0.5
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(
                hypercorn.trio.serve, cast(Any, make_app(url)), config, shutdown_trigger=stop.wait
            )
        )
        yield url
        stop.set()


def streamable_app(server: MCPServer) -> Callable[[str], App]:
    def make(url: str) -> App:
        del url
        return server.streamable_http_app()

    return make


def sse_app(server: MCPServer) -> Callable[[str], App]:
    """The legacy SSE transport: GET /sse streams, POST /messages/ sends."""

    def make(url: str) -> App:
        del url
        transport = SseServerTransport("/messages/")
        lowlevel = server._lowlevel_server

        class Stream:  # a class: Starlette runs it as a raw ASGI app (no response of its own)
            async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
                async with transport.connect_sse(scope, receive, send) as (read, write):
                    await lowlevel.run(read, write, lowlevel.create_initialization_options())

        return Starlette(
            routes=[
                Route("/sse", endpoint=Stream(), methods=["GET"]),
                Mount("/messages/", app=transport.handle_post_message),
            ]
        )

    return make


class AutoApprove:
    """An in-memory OAuth authorization server that grants every authorization request."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.authorized = 0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self.authorized += 1
        sep = "&" if "?" in str(params.redirect_uri) else "?"
        return f"{params.redirect_uri}{sep}code={code}&state={params.state}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        token = secrets.token_urlsafe(16)
        refresh = secrets.token_urlsafe(16)
        self.tokens[token] = AccessToken(
            token=token,
            client_id=authorization_code.client_id,
            scopes=authorization_code.scopes,
            expires_at=int(time.time()) + 3600,
            resource=authorization_code.resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=authorization_code.client_id, scopes=authorization_code.scopes
        )
        return OAuthToken(
            access_token=token, token_type="Bearer", expires_in=3600, refresh_token=refresh
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        raise NotImplementedError

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.tokens.pop(token.token, None)


def oauth_app(provider: AutoApprove) -> Callable[[str], App]:
    """A streamable HTTP server at /mcp that requires a token issued by its own ``provider``."""

    def make(url: str) -> App:
        auth = AuthSettings(
            issuer_url=AnyHttpUrl(url),
            resource_server_url=AnyHttpUrl(f"{url}/mcp"),
            client_registration_options=ClientRegistrationOptions(enabled=True),
            validate_token_resource=False,
        )
        return tools_server(
            "secured", auth_server_provider=provider, auth=auth
        ).streamable_http_app()

    return make
