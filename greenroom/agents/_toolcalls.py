"""Running the tool calls of one model response: checks, approval, execution, results.

Each call is checked first: an unknown tool, arguments that are not a JSON object or that
fail the tool's schema become a tool error the model sees (upstream texts); such a call never
asks and never runs. Then the approval order of ``_permissions`` decides. A call that asks
emits ``tool_call_confirmation`` and waits for the answer (one question at a time; with a
``confirmation_timeout`` an unanswered question is rejected). Every answer is audited on the
session through :meth:`TurnIO.record_approval`.

Consecutive calls that need no question and whose tools are read-only run concurrently, each
a child task of the turn; any other call runs alone, in order, so a write is never reordered
with the reads around it. Results are recorded in call order. A cancelled turn cancels every
running call; the calls left without a result are recorded as cancelled by the runtime.

A code-mode script's calls (``_codemode.py``) take the same path one at a time through
:meth:`ToolCalls.run_for_script`, without a history message or an intent of their own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import jsonschema
import trio

from greenroom.domain import (
    Approval,
    ChatMessage,
    HookBlocked,
    ImageURL,
    Message,
    MessagePart,
    Permissions,
    ToolCall,
    ToolCallConfirmation,
    ToolCallEvent,
    ToolCallResponse,
    Warning,
    utcnow,
)
from greenroom.observe import approval_span, metrics, tool_span

from ._confirm import Confirmations, is_approval
from ._frame import Frame, ManagedTool
from ._hooks import HookOutcome, Hooks, failure_warning, tool_fields
from ._permissions import Decision, Verdict, decide
from ._runtime import ResumeRequest, TurnIO
from .tools import AgentTools, Tool, ToolResult, command_of, tool_definition

log = logging.getLogger(__name__)

CANCELLED = "The tool call was canceled by the user."
BACKGROUND_ASK = (
    "The tool call needs the user's confirmation, which a background agent cannot ask for."
)
NO_OUTPUT = "(no output)"


@attrs.frozen
class Prepared:
    """A call after its checks: the tool and arguments, or the error result it gets."""

    call: ToolCall
    tool: Tool | None
    arguments: Mapping[str, Any] | None
    definition: Any
    failure: ToolResult | None = None


def _invalid(text: str) -> ToolResult:
    return ToolResult(f"Error calling tool: invalid arguments: {text}", is_error=True)


def _schema_error(exc: jsonschema.ValidationError) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
    return f"{exc.message} at ${path}"


def prepare(call: ToolCall, tools: AgentTools) -> Prepared:
    return prepare_in(call, tools.tools.get(call.function.name))


def prepare_in(call: ToolCall, tool: Tool | None) -> Prepared:
    """``call`` checked against ``tool`` (None: the tool is not available)."""
    name = call.function.name
    if tool is None:
        text = f"Tool '{name}' is not available. You can only use the tools provided to you."
        return Prepared(call, None, None, {"name": name}, ToolResult(text, is_error=True))
    return check_arguments(call, tool)


def check_arguments(call: ToolCall, tool: Tool) -> Prepared:
    """``call`` of ``tool`` with its arguments decoded and checked against the tool's schema."""
    definition = tool_definition(tool)
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except ValueError as exc:
        return Prepared(call, tool, None, definition, _invalid(str(exc)))
    if not isinstance(arguments, dict):
        return Prepared(call, tool, None, definition, _invalid("expected a JSON object"))
    # Upstream drops keys whose value is null before a call (optional arguments left unset).
    arguments = {k: v for k, v in arguments.items() if v is not None}
    try:
        validator = jsonschema.Draft202012Validator(dict(tool.spec.parameters))
        problem = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except jsonschema.SchemaError:
        problem = None  # a tool with a broken schema is the tool's problem, not the model's
    if problem is not None:
        return Prepared(call, tool, arguments, definition, _invalid(_schema_error(problem)))
    return Prepared(call, tool, arguments, definition)


def _no_hooks(agent_name: str) -> Hooks | None:
    return None


def digest(arguments_text: str) -> str:
    return "sha256:" + hashlib.sha256(arguments_text.encode()).hexdigest()


@attrs.define
class ToolCalls:
    """The tool-call machinery of one runtime (its confirmation rendezvous and options)."""

    confirmations: Confirmations
    file_permissions: Permissions | None
    confirmation_timeout: float | None = None
    now: Callable[[], dt.datetime] = utcnow
    hooks_of: Callable[[str], Hooks | None] = _no_hooks
    """The hooks of an agent, by name (``_hooks.py``)."""

    async def run_batch(
        self,
        frame: Frame,
        tools: AgentTools,
        calls: tuple[ToolCall, ...],
        on_recorded: Callable[[ToolCall], None],
    ) -> None:
        """Run ``calls`` and record their results in call order (see the module docstring)."""
        io = frame.io
        agent_name = frame.agent_name or frame.agent.name
        prepared = [prepare(call, tools) for call in calls]
        index = 0
        while index < len(prepared):
            group = [prepared[index]]
            if self._parallel(io, agent_name, group[0]):
                while index + len(group) < len(prepared) and self._parallel(
                    io, agent_name, prepared[index + len(group)]
                ):
                    group.append(prepared[index + len(group)])
            results = await self._run_group(frame, agent_name, group)
            for item, result in zip(group, results, strict=True):
                assert result is not None
                await self._record(io, agent_name, item, result)
                on_recorded(item.call)
            index += len(group)

    async def _run_group(
        self, frame: Frame, agent_name: str, group: list[Prepared]
    ) -> list[ToolResult | None]:
        results: list[ToolResult | None] = [None] * len(group)

        async def one(slot: int, item: Prepared) -> None:
            with tool_span(item.call.function.name, item.call.id, agent_name) as traced:
                results[slot] = result = await self._run_one(frame, agent_name, item)
                traced.set_attribute("greenroom.tool.is_error", result.is_error)

        if len(group) == 1:
            await one(0, group[0])
            return results
        async with trio.open_nursery() as nursery:  # each call a child task of the turn
            for slot, item in enumerate(group):
                nursery.start_soon(one, slot, item)
        return results

    def _parallel(self, io: TurnIO, agent_name: str, item: Prepared) -> bool:
        """Whether ``item`` may run beside its neighbours: read-only, allowed as it is, and no
        ``pre_tool_use`` hook to ask first."""
        tool = item.tool
        if item.failure is not None or tool is None or not tool.annotations.read_only:
            return False
        hooks = self.hooks_of(agent_name)
        if hooks is not None and hooks.has("pre_tool_use", item.call.function.name):
            return False
        if isinstance(tool, ManagedTool):
            return False  # delegation switches agents and nests turns: one at a time
        verdict = decide(
            item.call.function.name,
            item.arguments,
            session=io.session,
            file_permissions=self.file_permissions,
            read_only=True,
            now=self.now(),
            command=command_of(tool, item.arguments),
        )
        return verdict.decision is Decision.ALLOW

    async def run_for_script(self, frame: Frame, tool: Tool | None, call: ToolCall) -> ToolResult:
        """Run ``call`` of ``tool`` on behalf of a code-mode script (``_codemode.py``).

        The same checks, hooks, permissions and questions as a call of the model, and the same
        ``tool_call`` and ``tool_call_response`` events; but its result is only returned (the
        model sees the script's result, not this call's) and no intent is recorded: the script's
        own call is the unit a crash leaves in doubt (decision 0032).
        """
        io = frame.io
        agent_name = frame.agent_name or frame.agent.name
        item = prepare_in(call, tool)
        result = await self._run_one(frame, agent_name, item, durable=False)
        response = ToolCallResponse(
            call.id, result.output, item.definition, agent_name, io.session.id
        )
        await io.emit(response)
        return result

    async def _run_one(
        self, frame: Frame, agent_name: str, item: Prepared, *, durable: bool = True
    ) -> ToolResult:
        if item.failure is not None or item.tool is None:
            metrics().tool_ended(tool_label(item), "invalid")  # unknown tool, bad arguments
            return item.failure or ToolResult("", is_error=True)
        io = frame.io
        hooks = self.hooks_of(agent_name)
        forced_ask = False
        if hooks is not None and hooks.has("pre_tool_use", item.call.function.name):
            checked = await self._pre_hooks(io, hooks, agent_name, item)
            if isinstance(checked, ToolResult):
                return checked
            item, forced_ask = checked
            if item.failure is not None or item.tool is None:
                return item.failure or ToolResult("", is_error=True)
        call, tool = item.call, item.tool
        assert tool is not None
        name = call.function.name
        verdict = decide(
            name,
            item.arguments,
            session=io.session,
            file_permissions=self.file_permissions,
            read_only=tool.annotations.read_only,
            now=self.now(),
            command=command_of(tool, item.arguments),
        )
        if forced_ask and verdict.decision is Decision.ALLOW:
            verdict = Verdict(Decision.ASK, "hook")
        if verdict.decision is Decision.DENY:
            metrics().tool_ended(name, "denied")
            return ToolResult(verdict.message, is_error=True)
        if verdict.decision is Decision.ASK and frame.background:
            metrics().tool_ended(name, "denied")
            return ToolResult(BACKGROUND_ASK, is_error=True)
        if verdict.decision is Decision.ASK:
            if hooks is not None and hooks.has("on_user_input"):
                outcome = await hooks.run(
                    "on_user_input",
                    {"session_id": io.session.id},
                    permissions=io.session.permissions,
                )
                await _hook_notes(io, agent_name, outcome)
            answer = await self._ask(io, agent_name, item, verdict.rule)
            if not is_approval(answer):
                metrics().tool_ended(name, "rejected")
                reason = f" Reason: {answer.reason}" if answer.reason.strip() else ""
                return ToolResult(f"The user rejected the tool call.{reason}", is_error=True)
        await io.emit(ToolCallEvent(call, item.definition, agent_name, io.session.id))
        if durable:  # the durability point: the intent is committed before the tool starts
            await io.begin_tool_call(call, agent_name)
        started = time.monotonic()
        result = await _invoke(tool, item, io.session.id, frame)
        ended = "error" if result.is_error else "ok"
        metrics().tool_ended(name, ended, time.monotonic() - started)
        if hooks is not None and hooks.has("post_tool_use", name):
            fields = tool_fields(io.session.id, name, call.id, item.arguments)
            fields["tool_response"] = result.output
            outcome = await hooks.run(
                "post_tool_use", fields, name, permissions=io.session.permissions
            )
            await _hook_notes(io, agent_name, outcome)
            if outcome.additional_context:
                output = f"{result.output}\n\n{outcome.additional_context}"
                result = attrs.evolve(result, output=output)
        return result

    async def _pre_hooks(
        self, io: TurnIO, hooks: Hooks, agent_name: str, item: Prepared
    ) -> ToolResult | tuple[Prepared, bool]:
        """The ``pre_tool_use`` hooks: a blocked call's result, or the call to go on with
        (its arguments replaced when a hook updated them) and whether a hook asks."""
        call = item.call
        name = call.function.name
        fields = tool_fields(io.session.id, name, call.id, item.arguments)
        outcome = await hooks.run("pre_tool_use", fields, name, permissions=io.session.permissions)
        await _hook_notes(io, agent_name, outcome)
        if not outcome.allowed:
            metrics().tool_ended(name, "blocked")
            event = HookBlocked(call, item.definition, outcome.message, agent_name, io.session.id)
            await io.emit(event)
            return ToolResult(f"Tool call blocked by hook: {outcome.message}", is_error=True)
        if outcome.updated_input is not None and item.tool is not None:
            text = json.dumps(dict(outcome.updated_input))
            changed = attrs.evolve(call, function=attrs.evolve(call.function, arguments=text))
            item = check_arguments(changed, item.tool)
        return item, outcome.ask

    async def rerun(self, tools: AgentTools, call: ToolCall) -> ToolResult:
        """Run ``call`` once more (a person's decision after a crash: no approval asked)."""
        item = prepare(call, tools)
        if item.failure is not None or item.tool is None:
            return item.failure or ToolResult("", is_error=True)
        return await _invoke(item.tool, item, "")

    async def _ask(
        self, io: TurnIO, agent_name: str, item: Prepared, rule: str = ""
    ) -> ResumeRequest:
        call = item.call
        event = ToolCallConfirmation(call, item.definition, agent_name, io.session.id, rule)
        timed_out = False
        answer: ResumeRequest | None = None
        with approval_span(call.function.name, call.id, rule) as traced:
            with trio.move_on_after(self.confirmation_timeout or math.inf) as scope:
                answer = await self.confirmations.ask(lambda: io.emit(event), call.function.name)
            traced.set_attribute("greenroom.approval.answer", answer.type if answer else "none")
        if scope.cancelled_caught or answer is None:
            timed_out = True
            answer = ResumeRequest(
                "reject", reason=f"no answer within {self.confirmation_timeout:g} seconds"
            )
        approval = self._approval(item, answer, timed_out)
        metrics().approvals.labels(approval.decision).inc()
        await io.record_approval(approval)
        return answer

    def _approval(self, item: Prepared, answer: ResumeRequest, timed_out: bool) -> Approval:
        now = self.now()
        name = item.call.function.name
        decision: str = "timeout" if timed_out else answer.type
        grant = ""
        expires_at = None
        if answer.type == "approve-tool":
            grant = answer.tool_name or name
        if answer.expires_in is not None and answer.type in ("approve-tool", "approve-autonomous"):
            expires_at = now + dt.timedelta(seconds=answer.expires_in)
            if answer.type == "approve-autonomous":
                decision = "approve-session"  # a grant that expires, not a policy switch
        return Approval(
            tool=name,
            decision=decision,
            decided_at=now,
            arguments_digest=digest(item.call.function.arguments),
            tool_call_id=item.call.id,
            decided_by=answer.decided_by,
            expires_at=expires_at,
            grant=grant,
            reason=answer.reason,
        )

    async def _record(
        self, io: TurnIO, agent_name: str, item: Prepared, result: ToolResult
    ) -> None:
        call = item.call
        parts: tuple[MessagePart, ...] = ()
        content = result.output if result.output.strip() else NO_OUTPUT
        if result.images:
            urls = [ImageURL(f"data:{i.mime_type};base64,{i.data}", "auto") for i in result.images]
            parts = (
                MessagePart("text", content),
                *(MessagePart("image_url", image_url=url) for url in urls),
            )
        chat = ChatMessage(
            role="tool",
            content=content,
            multi_content=parts,
            tool_call_id=call.id,
            is_error=result.is_error,
            created_at=utcnow(),
        )
        await io.add_message(Message(chat, agent_name=agent_name))
        session_id = io.session.id
        await io.emit(
            ToolCallResponse(call.id, result.output, item.definition, agent_name, session_id)
        )


async def _hook_notes(io: TurnIO, agent_name: str, outcome: HookOutcome) -> None:
    """Warnings for a hook's ``system_message`` and for hooks that timed out or failed."""
    for text in (outcome.system_message, failure_warning(outcome)):
        if text:
            await io.emit(Warning(message=text, agent_name=agent_name))


async def _invoke(
    tool: Tool, item: Prepared, session_id: str, frame: Frame | None = None
) -> ToolResult:
    try:
        if isinstance(tool, ManagedTool) and frame is not None:
            return await tool.call_in(frame, item.arguments or {})
        return await tool.call(item.arguments or {})
    except Exception as exc:
        name = item.call.function.name
        log.warning("session %s: tool %s failed", session_id, name, exc_info=True)
        return ToolResult(f"Error calling tool: {exc}", is_error=True)


def tool_label(item: Prepared) -> str:
    """A call's tool as a metric label: a name the model made up is ``unknown``."""
    return item.call.function.name if item.tool is not None else "unknown"
