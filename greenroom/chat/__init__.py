"""``greenroom chat``: a terminal client over :mod:`greenroom.client` (prompt_toolkit + rich).

It reaches the server only through the public HTTP API; with no URL, ``greenroom chat`` starts
an embedded server first (see ``cli.py``).
"""

from __future__ import annotations

import asyncio

from greenroom.client import GreenroomClient

from ._app import ChatApp as ChatApp
from ._output import Output as Output


def run_chat(url: str, *, token: str = "", agent: str = "", session_id: str = "") -> int:
    """Run the chat REPL against the server at ``url`` until the user quits; the exit code."""

    async def main() -> int:
        async with GreenroomClient(url, token=token) as client:
            return await ChatApp(client, agent=agent, session_id=session_id).run()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130


__all__ = ["ChatApp", "Output", "run_chat"]
