"""The actor's command table: which handler runs each command, and the checks handlers share.

Handlers register with :func:`handles` in ``_handlers.py`` (turns, queries, history, endings) and
``_metadata.py`` (titles, permissions, policies, models); ``_session.py`` dispatches through
:data:`TABLE`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from greenroom.agents import Runtime
from greenroom.errors import SessionBusy, SessionNotRunning

from . import _commands as c
from ._context import ActorContext

Q = TypeVar("Q", bound=c.Request[Any])
Handler = Callable[[ActorContext, Any], Awaitable[Any]]
TABLE: dict[type[c.Request[Any]], Handler] = {}


def handles(command: type[Q]) -> Callable[[Callable[[ActorContext, Q], Awaitable[Any]]], Handler]:
    def register(fn: Callable[[ActorContext, Q], Awaitable[Any]]) -> Handler:
        TABLE[command] = fn
        return fn

    return register


def require_idle(ctx: ActorContext) -> None:
    if ctx.streaming:
        raise SessionBusy()


def require_runtime(ctx: ActorContext) -> Runtime:
    if ctx.runtime is None:
        raise SessionNotRunning()
    return ctx.runtime
