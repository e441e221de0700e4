"""The MCP OAuth flows of this server that wait for their redirect, by ``state``.

``POST /api/mcp-oauth/callback?state=&code=`` (route 36) delivers a redirect here; the flow
(``agents/mcp/_oauth.py``) that registered the ``state`` takes it and exchanges the code.
"""

from __future__ import annotations

import attrs
import trio

from greenroom.errors import InvalidRequest, OAuthFlowNotFound

MAX_FLOWS = 64
"""Flows that may wait at once (each holds a server connection attempt)."""


@attrs.frozen
class Redirect:
    """What the authorization server's redirect carried."""

    code: str = ""
    error: str = ""
    error_description: str = ""


class OAuthFlows:
    """The OAuth flows of this process waiting for their redirect, by ``state``.

    Synchronous, so a delivery and a flow's end cannot interleave: a redirect either reaches
    its flow or is refused with :class:`OAuthFlowNotFound`.
    """

    def __init__(self, limit: int = MAX_FLOWS) -> None:
        self._waiting: dict[str, trio.MemorySendChannel[Redirect]] = {}
        self._limit = limit

    def open(self, state: str) -> trio.MemoryReceiveChannel[Redirect]:
        """Register a flow for ``state``; its redirect arrives on the returned channel."""
        if len(self._waiting) >= self._limit:
            from mcp.client.auth import OAuthFlowError  # the MCP SDK: only when refusing

            raise OAuthFlowError(f"too many OAuth flows waiting (at most {self._limit})")
        send, receive = trio.open_memory_channel[Redirect](1)
        self._waiting[state] = send
        return receive

    def close(self, state: str) -> None:
        send = self._waiting.pop(state, None)
        if send is not None:
            send.close()

    @property
    def waiting(self) -> list[str]:
        return list(self._waiting)

    def deliver(self, state: str, redirect: Redirect) -> None:
        """Hand a redirect to the flow waiting for ``state``.

        Raises:
            OAuthFlowNotFound: no flow waits for ``state``.
            InvalidRequest: neither a code nor an error (the flow keeps waiting).
        """
        if state not in self._waiting:
            raise OAuthFlowNotFound(f"no pending OAuth flow for state {state!r}")
        if not redirect.code and not redirect.error:
            raise InvalidRequest("query.code: a code or an error is required", path="query.code")
        send = self._waiting.pop(state)
        with send:
            send.send_nowait(redirect)
