"""Building a session's runtime in a child task of its actor, so the mailbox never waits for it.

The first run of a session without a runtime (or a ``rerun`` decision after a restart: any
handler that raises :class:`NeedsRuntime`) parks its call and starts :func:`build_runtime`:
the factory builds the runtime, then the runtime's services start (``serve``: its MCP servers
answer, fail or time out). Meanwhile the session is *building*: status answers (``building``:
true), steer and the like answer that nothing runs yet, a delete cancels the build and stops the
servers. Once built, the task hands the runtime to the actor as an :class:`InstallRuntime`
command (so installing it is linearised with every other command) and the parked runs go on.

The task then stays: it is the parent of the runtime's services, until the actor stops or the
session is deleted (``actor.runtime_scope``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from greenroom.agents import BuiltRuntime
from greenroom.errors import GreenroomError

from . import _commands as c

if TYPE_CHECKING:
    from ._session import SessionActor

log = logging.getLogger(__name__)

CLOSE_BUDGET = 5.0
"""Seconds a runtime that was built but not installed may take to close."""


class NeedsRuntime(Exception):
    """A handler needs the session's runtime, which is not built yet: the actor parks the call,
    builds the runtime (agent ``source``, starting on ``agent_name``) and dispatches the call
    again once it is installed. Raise it before changing anything."""

    def __init__(self, source: str, agent_name: str) -> None:
        super().__init__(source, agent_name)
        self.source = source
        self.agent_name = agent_name


async def build_runtime(actor: SessionActor, source: str, agent_name: str) -> None:
    scope = trio.CancelScope()
    actor.runtime_scope = scope
    built: BuiltRuntime | None = None
    try:
        with scope:
            try:
                built = await actor.registry.factory.build(source, agent_name, actor.session)
            except GreenroomError as exc:
                actor.fail_parked(exc)
                return
            except Exception:
                log.exception("building the runtime of session %s failed", actor.id)
                actor.fail_parked(GreenroomError("building the agent runtime failed"))
                return
            await _serve(actor, built, source, agent_name)
    finally:
        if actor.runtime_scope is scope:
            actor.runtime_scope = None
        if built is not None and actor.runtime is not built.runtime:
            with trio.move_on_after(CLOSE_BUDGET, shield=True):
                await built.runtime.aclose()


async def _serve(actor: SessionActor, built: BuiltRuntime, source: str, agent_name: str) -> None:
    """Start the runtime's services, install it, then keep the services until cancelled. A
    service that fails after the start (a bug) is logged; the session goes on without it."""
    serve: Any = getattr(built.runtime, "serve", None)
    try:
        async with trio.open_nursery() as services:
            if serve is not None:
                try:
                    await services.start(serve)
                except Exception:
                    log.exception("the runtime of session %s failed to start", actor.id)
                    actor.fail_parked(GreenroomError("starting the agent runtime failed"))
                    return
            try:
                await actor.registry.call_actor(actor, c.InstallRuntime(built, source, agent_name))
            except GreenroomError as exc:
                actor.fail_parked(exc)
                services.cancel_scope.cancel()
            except BaseException:
                services.cancel_scope.cancel()
                raise
    except* Exception:
        log.exception("the services of session %s's runtime failed", actor.id)
