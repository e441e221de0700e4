"""The handlers of a session's metadata: title, permissions, token counts, star, safety
policy, thinking, blanket tool approval, and the agents' models. Each runs inside the actor."""

from __future__ import annotations

from functools import partial

from greenroom.domain import Approval, utcnow
from greenroom.errors import InvalidRequest, ModelSwitchingNotSupported

from . import _commands as c
from ._context import ActorContext
from ._table import handles, require_runtime

# --- metadata ----------------------------------------------------------------------------


@handles(c.SetTitle)
async def _set_title(ctx: ActorContext, cmd: c.SetTitle) -> None:
    await ctx.live.update(partial(ctx.store.update_title, ctx.id, cmd.title), title=cmd.title)


@handles(c.SetPermissions)
async def _set_permissions(ctx: ActorContext, cmd: c.SetPermissions) -> None:
    write = partial(ctx.store.update_permissions, ctx.id, cmd.permissions)
    await ctx.live.update(write, permissions=cmd.permissions)


@handles(c.SetTokens)
async def _set_tokens(ctx: ActorContext, cmd: c.SetTokens) -> None:
    cost = ctx.session.cost if cmd.cost is None else cmd.cost
    write = partial(ctx.store.update_tokens, ctx.id, cmd.input_tokens, cmd.output_tokens, cost)
    await ctx.live.update(
        write, input_tokens=cmd.input_tokens, output_tokens=cmd.output_tokens, cost=cost
    )


@handles(c.SetStarred)
async def _set_starred(ctx: ActorContext, cmd: c.SetStarred) -> None:
    await ctx.live.update(partial(ctx.store.set_starred, ctx.id, cmd.starred), starred=cmd.starred)


SAFETY_POLICIES = {
    "": "",
    "strict": "strict",
    "balanced": "balanced",
    "restricted": "restricted",
    "autonomous": "autonomous",
    "unsafe": "autonomous",
    "safer": "balanced",
    "safe-auto": "balanced",
}


@handles(c.SetSafetyPolicy)
async def _set_safety_policy(ctx: ActorContext, cmd: c.SetSafetyPolicy) -> None:
    if cmd.policy not in SAFETY_POLICIES:
        raise InvalidRequest(
            f"$.safety_policy: unknown safety policy {cmd.policy!r}", path="$.safety_policy"
        )
    policy = SAFETY_POLICIES[cmd.policy]
    await ctx.live.update(None, safety_policy=policy, tools_approved=policy == "autonomous")


@handles(c.ToggleThinking)
async def _toggle_thinking(ctx: ActorContext, _: c.ToggleThinking) -> None:
    await ctx.live.update(None, thinking=not ctx.session.thinking)


@handles(c.ToggleToolApproval)
async def _toggle_tool_approval(ctx: ActorContext, cmd: c.ToggleToolApproval) -> None:
    approved = not ctx.session.tools_approved
    policy = "autonomous" if approved else ""
    await ctx.live.update(None, tools_approved=approved, safety_policy=policy)
    # A blanket approval is a decision on every later tool call: audited like the others.
    decision = "tools-toggle-on" if approved else "tools-toggle-off"
    await ctx.live.record_approval(Approval("*", decision, utcnow(), decided_by=cmd.decided_by))


@handles(c.SetModel)
async def _set_model(ctx: ActorContext, cmd: c.SetModel) -> None:
    runtime = require_runtime(ctx)
    if not runtime.supports_model_switching():
        raise ModelSwitchingNotSupported()
    await runtime.set_agent_model(cmd.agent, cmd.ref)
    overrides = dict(ctx.session.agent_model_overrides)
    if cmd.ref:
        overrides[cmd.agent] = cmd.ref
    else:
        overrides.pop(cmd.agent, None)
    await ctx.live.update(None, agent_model_overrides=overrides)
