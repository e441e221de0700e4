"""OAuth for remote MCP servers: the SDK's client (discovery, dynamic client registration,
PKCE, token refresh) with greenroom's two ends of the browser round trip.

- The authorization URL reaches the user as an ``elicitation_request`` (``mode: url``, ``meta``
  ``{"cagent/type": "oauth_flow", "cagent/server_url": ...}``) on the session's run stream and
  event log. Declining it (or nobody listening) ends the flow at once.
- The redirect back (to ``redirect_uri``: a page of the client, or the callback route itself)
  carries ``state`` and ``code``; ``POST /api/mcp-oauth/callback?state=&code=`` hands them to the
  flow waiting for that ``state`` (:class:`OAuthFlows`), which then exchanges the code.

Tokens and the registered client are stored per server URL in the data directory, one JSON file
each, mode 0600 (:class:`FileTokenStorage`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, ValidationError

from .._elicitation import ElicitationAnswer
from .._oauth_flows import OAuthFlows, Redirect

log = logging.getLogger(__name__)

FLOW_TIMEOUT = 600.0
"""Seconds a flow waits for its redirect before it fails."""


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(temporary, 0o600)  # the umask cannot widen it; an older file keeps no other mode
    os.replace(temporary, path)


def token_path(data_dir: Path, server_url: str) -> Path:
    digest = hashlib.sha256(server_url.encode()).hexdigest()[:16]
    return data_dir / "mcp-oauth" / f"{digest}.json"


class FileTokenStorage:
    """The SDK's TokenStorage in one JSON file per server (mode 0600, directory 0700)."""

    def __init__(self, path: Path, server_url: str) -> None:
        self.path = path
        self.server_url = server_url

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("server_url") == self.server_url else {}

    async def _update(self, key: str, value: dict[str, Any]) -> None:
        def write() -> None:
            data = self._read() or {"server_url": self.server_url}
            data[key] = value
            _write_private(self.path, json.dumps(data))

        await trio.to_thread.run_sync(write)

    async def get_tokens(self) -> OAuthToken | None:
        raw = (await trio.to_thread.run_sync(self._read)).get("tokens")
        try:
            return OAuthToken.model_validate(raw) if raw else None
        except ValidationError:
            return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._update("tokens", tokens.model_dump(mode="json", exclude_none=True))

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = (await trio.to_thread.run_sync(self._read)).get("client_info")
        try:
            return OAuthClientInformationFull.model_validate(raw) if raw else None
        except ValidationError:
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._update("client_info", client_info.model_dump(mode="json", exclude_none=True))


Elicit = Callable[..., Awaitable[ElicitationAnswer]]


def oauth_provider(
    server_url: str,
    *,
    data_dir: Path,
    flows: OAuthFlows,
    redirect_uri: str,
    elicit: Elicit,
    on_redirect: Callable[[], None],
    timeout: float = FLOW_TIMEOUT,
) -> OAuthClientProvider:
    """The SDK's OAuth client for ``server_url``, wired to greenroom's flows (module doc).

    ``on_redirect`` is called when a flow got its code (the exchange for a token follows).
    """
    pending: dict[str, str] = {}

    async def show(authorization_url: str) -> None:
        await trio.lowlevel.checkpoint()
        pending["url"] = authorization_url

    async def wait_for_redirect() -> AuthorizationCodeResult:
        url = pending.pop("url", "")
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        state = (query.get("state") or [""])[0]
        if not state:
            raise OAuthFlowError("the authorization URL carries no state")
        redirects = flows.open(state)
        outcome: list[Redirect | str] = []
        try:
            async with trio.open_nursery() as nursery:

                async def ask_user() -> None:
                    answer = await elicit(
                        f"The MCP server at {server_url} requires OAuth authorization: "
                        "open the URL to sign in.",
                        mode="url",
                        url=url,
                        meta={
                            "cagent/type": "oauth_flow",
                            "cagent/server_url": server_url,
                            "redirect_uri": redirect_uri,
                        },
                    )
                    if answer.action != "accept":
                        outcome.append(f"the authorization request was {answer.action}d")
                        nursery.cancel_scope.cancel()

                nursery.start_soon(ask_user)
                with trio.move_on_after(timeout):
                    async with redirects:
                        with contextlib.suppress(trio.EndOfChannel):
                            outcome.append(await redirects.receive())
                nursery.cancel_scope.cancel()
        finally:
            flows.close(state)
        if not outcome:
            raise OAuthFlowError(f"no authorization within {timeout:g} seconds")
        result = outcome[0]
        if isinstance(result, str):
            raise OAuthFlowError(result)
        if result.error:
            detail = f": {result.error_description}" if result.error_description else ""
            raise OAuthFlowError(f"authorization failed: {result.error}{detail}")
        on_redirect()
        return AuthorizationCodeResult(code=result.code, state=state)

    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(redirect_uri)],
        client_name="greenroom",
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    storage = FileTokenStorage(token_path(data_dir, server_url), server_url)
    return OAuthClientProvider(
        server_url,
        metadata,
        storage,
        redirect_handler=show,
        callback_handler=wait_for_redirect,
    )
