"""Building a session's runtime in a child task of its actor, so the mailbox never waits for it.

The first run of a session without a runtime (or a ``rerun`` decision after a restart: any
handler that raises :class:`NeedsRuntime`) parks its call and starts :func:`build_runtime`:
the factory builds the runtime, then the runtime's services start (``serve``: its MCP servers
answer, fail or time out). Meanwhile the session is *building*: status answers (``building``:
true), steer and the like answer that nothing runs yet, a delete cancels the build and stops the
servers. Once built, the task hands the runtime to the actor as an :class:`InstallRuntime`
command (so installing it is linearised with every other command) and the parked runs go on.

The task then stays: it is the parent of the runtime's services, until the actor stops or the
session is deleted (the scope the actor gives it).
"""

from __future__ import annotations

import logging

import trio

from greenroom.agents import BuiltRuntime, supports_serve
from greenroom.errors import GreenroomError
from greenroom.observe import detached

from ._commands import InstallRuntime
from ._context import ActorContext

log = logging.getLogger(__name__)

CLOSE_BUDGET = 5.0
"""Seconds a runtime that was built but not installed may take to close."""


async def build_runtime(
    ctx: ActorContext, scope: trio.CancelScope, source: str, agent_name: str
) -> None:
    """The build task, run under ``scope`` (the actor cancels it on delete)."""
    built: BuiltRuntime | None = None
    try:
        with scope:
            try:
                built = await ctx.factory.build(source, agent_name, ctx.session)
            except GreenroomError as exc:
                ctx.fail_parked(exc)
                return
            except Exception:
                log.exception("building the runtime of session %s failed", ctx.id)
                ctx.fail_parked(GreenroomError("building the agent runtime failed"))
                return
            await _serve(ctx, built, source, agent_name)
    finally:
        ctx.build_ended(scope)
        if built is not None and ctx.runtime is not built.runtime:
            with trio.move_on_after(CLOSE_BUDGET, shield=True):
                await built.runtime.aclose()


async def _serve(ctx: ActorContext, built: BuiltRuntime, source: str, agent_name: str) -> None:
    """Start the runtime's services, install it, then keep the services until cancelled. A
    service that fails after the start (a bug) is logged; the session goes on without it."""
    runtime = built.runtime
    try:
        async with trio.open_nursery() as services:
            if supports_serve(runtime):
                try:
                    with detached():  # services outlive the run that built them: no trace
                        await services.start(runtime.serve)
                except Exception:
                    log.exception("the runtime of session %s failed to start", ctx.id)
                    ctx.fail_parked(GreenroomError("starting the agent runtime failed"))
                    return
            try:
                await ctx.call_self(InstallRuntime(built, source, agent_name))
            except GreenroomError as exc:
                ctx.fail_parked(exc)
                services.cancel_scope.cancel()
            except BaseException:
                services.cancel_scope.cancel()
                raise
    except* Exception:
        log.exception("the services of session %s's runtime failed", ctx.id)
