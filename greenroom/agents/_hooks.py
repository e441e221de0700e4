"""Hooks: an agent's shell commands run at points of its life (docker-agent's ``hooks``).

Each hook runs as ``$SHELL -c <command>`` (else ``/bin/sh``) in the session's working directory,
with the tools' environment, in a process group of its own (as the shell tool's commands: see
``tools/_process.py``), the event's JSON on stdin. The hooks of one event run concurrently,
each command once. A hook that outlives its ``timeout`` (60 s by default) has its whole process
group killed and is reported (:attr:`HookOutcome.failures`); so is one that cannot start.

What a hook answers, as upstream reads it: exit 2 blocks (stderr is the reason); another
non-zero exit is ignored (logged); exit 0 with a JSON object on stdout may say
``continue: false`` (with ``stop_reason``) or ``decision: block`` (with ``reason``) to block,
``system_message`` (a warning shown to the user), and ``hook_specific_output`` with
``permission_decision`` (``allow`` / ``deny`` / ``ask``) and its reason, ``updated_input`` (the
tool's new arguments) and ``additional_context``; plain stdout of a ``session_start`` or
``post_tool_use`` hook is additional context.

When they run (``_toolcalls.py`` and ``_local.py``): ``pre_tool_use`` before a tool call's
approval (deny blocks it without asking; ask makes it ask even when the policy would allow it;
allow leaves the approval order as it is; updated input replaces the arguments, which are
checked again); ``post_tool_use`` after the tool (additional context is appended to the result
the model sees); ``session_start`` before the first turn of a runtime (its context joins the
system prompt); ``session_end`` when the runtime closes; ``on_user_input`` when the user is
asked something (a confirmation, an elicitation) and when a turn ends.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from greenroom.domain import Permissions

from ._config import HookCommand, HookMatcher, HooksConfig
from ._permissions import FILE_RULES, PROCESS_TOOL, SESSION_RULES, Decision, rule_verdict
from .tools._base import ProcessLedger
from .tools._process import forget_ended, go_duration, kill_group, track

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 64 * 1024
"""Bytes of a hook's stdout and of its stderr kept."""


@attrs.frozen
class HookOutcome:
    """The combined answer of the hooks of one event."""

    allowed: bool = True
    message: str = ""
    """Why it was blocked (the hooks' reasons, one a line)."""
    ask: bool = False
    """A ``pre_tool_use`` hook asked for the user's confirmation."""
    updated_input: Mapping[str, Any] | None = None
    additional_context: str = ""
    system_message: str = ""
    failures: tuple[str, ...] = ()
    """Hooks that timed out or could not start, for a warning."""


@attrs.frozen
class _Ran:
    hook: HookCommand
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    failure: str = ""


def _matches(matcher: HookMatcher, tool: str) -> bool:
    if matcher.matcher in ("", "*"):
        return True
    try:
        return re.fullmatch(f"(?:{matcher.matcher})", tool) is not None
    except re.error:
        return False  # validated at load time; a bad one matches nothing


async def _pump(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    async with stream:
        while chunk := await stream.receive_some(65536):
            if len(into) < OUTPUT_LIMIT:
                into.extend(chunk[: OUTPUT_LIMIT - len(into)])


async def _feed(stream: trio.abc.SendStream | None, payload: bytes) -> None:
    if stream is None:
        return
    async with stream:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(payload)  # a hook may exit without reading its input


async def run_hook(
    hook: HookCommand,
    payload: bytes,
    *,
    cwd: Path,
    env: Mapping[str, str],
    shell: str,
    processes: ProcessLedger | None = None,
) -> _Ran:
    """Run one hook to completion or its timeout (then its process group is killed); the group
    is watched and recorded like a tool's (``tools/_process.py``)."""
    await forget_ended()
    try:
        proc = await trio.lowlevel.open_process(
            [shell, "-c", hook.command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(cwd),
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return _Ran(hook, failure=f"hook {hook.command!r} could not start: {exc}")
    await track(proc, processes, f"hook {hook.command}")
    out, err = bytearray(), bytearray()
    finished = False
    try:
        with trio.move_on_after(hook.timeout):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, proc.stdout, out)
                nursery.start_soon(_pump, proc.stderr, err)
                nursery.start_soon(_feed, proc.stdin, payload)
                await proc.wait()
            finished = True
    finally:
        if not finished:
            kill_group(proc)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if isinstance(stream, trio.lowlevel.FdStream):
                    stream.close()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if not finished:
        what = f"hook {hook.command!r} timed out after {go_duration(hook.timeout)} and was killed"
        return _Ran(hook, stdout, stderr, -1, what)
    return _Ran(hook, stdout, stderr, proc.returncode or 0)


def _json_output(stdout: str) -> Mapping[str, Any] | None:
    text = stdout.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


def combine(results: Sequence[_Ran], event: str) -> HookOutcome:
    """Upstream's aggregation of the hooks' answers (see the module docstring)."""
    allowed, ask = True, False
    messages: list[str] = []
    contexts: list[str] = []
    system: list[str] = []
    failures: list[str] = []
    updated: dict[str, Any] | None = None
    for ran in results:
        if ran.failure:
            failures.append(ran.failure)
            continue
        if ran.exit_code == 2:
            allowed = False
            if ran.stderr.strip():
                messages.append(ran.stderr.strip())
            continue
        if ran.exit_code != 0:
            log.info("hook %r exited %d: %s", ran.hook.command, ran.exit_code, ran.stderr[-500:])
            continue
        output = _json_output(ran.stdout)
        if output is None:
            if ran.stdout.strip() and event in ("session_start", "post_tool_use"):
                contexts.append(ran.stdout.strip())
            continue
        if output.get("continue") is False:
            allowed = False
            if output.get("stop_reason"):
                messages.append(str(output["stop_reason"]))
        if output.get("decision") == "block":
            allowed = False
            if output.get("reason"):
                messages.append(str(output["reason"]))
        if output.get("system_message"):
            system.append(str(output["system_message"]))
        specific = output.get("hook_specific_output")
        if not isinstance(specific, Mapping):
            continue
        if event == "pre_tool_use":
            decision = specific.get("permission_decision")
            if decision == "deny":
                allowed = False
                if specific.get("permission_decision_reason"):
                    messages.append(str(specific["permission_decision_reason"]))
            elif decision == "ask":
                ask = True
            new_input = specific.get("updated_input")
            if isinstance(new_input, Mapping):
                updated = {**(updated or {}), **new_input}
        if specific.get("additional_context"):
            contexts.append(str(specific["additional_context"]))
    return HookOutcome(
        allowed=allowed,
        message="\n".join(messages),
        ask=ask,
        updated_input=updated,
        additional_context="\n".join(contexts),
        system_message="\n".join(system),
        failures=tuple(failures),
    )


@attrs.define(eq=False)
class Hooks:
    """The hooks of one agent, run for one runtime's sessions."""

    config: HooksConfig
    working_dir: Path
    env: Mapping[str, str]
    """The tools' environment, without the server's secrets (``tools/_environment.py``)."""
    processes: ProcessLedger | None = None
    file_permissions: Permissions | None = None

    def denied(self, command: str, permissions: Permissions | None) -> str:
        """Why a deny rule (the session's or the file's) stops ``command``; "" when none does.

        A hook is the agent file's own code: allow and ask rules do not apply to it (there is no
        one to ask), but a deny rule about a command holds for hooks as for the shell tool."""
        arguments = {"cmd": command}
        for label, perms in ((SESSION_RULES, permissions), (FILE_RULES, self.file_permissions)):
            verdict = rule_verdict(PROCESS_TOOL, arguments, [(label, perms)], command=command)
            if verdict is not None and verdict.decision is Decision.DENY:
                return verdict.message or f"denied by {label}"
        return ""

    @property
    def shell(self) -> str:
        return self.env.get("SHELL") or "/bin/sh"

    def matching(self, event: str, tool: str) -> list[HookCommand]:
        matchers: tuple[HookMatcher, ...] = getattr(self.config, event)
        return [hook for m in matchers if _matches(m, tool) for hook in m.hooks]

    def has(self, event: str, tool: str = "") -> bool:
        if event in ("pre_tool_use", "post_tool_use"):
            return bool(self.matching(event, tool))
        return bool(getattr(self.config, event))

    async def run(
        self,
        event: str,
        fields: Mapping[str, Any],
        tool: str = "",
        *,
        permissions: Permissions | None = None,
    ) -> HookOutcome:
        """Run the hooks of ``event`` (for ``tool``) with ``fields`` added to the input; a hook
        whose command a deny rule covers (``permissions``: the session's) is not run and is
        reported as a failure."""
        if event in ("pre_tool_use", "post_tool_use"):
            hooks: Iterable[HookCommand] = self.matching(event, tool)
        else:
            hooks = getattr(self.config, event)
        unique = list({hook.command: hook for hook in hooks}.values())
        if not unique:
            return HookOutcome()
        body = {"cwd": str(self.working_dir), "hook_event_name": event, **fields}
        payload = json.dumps({k: v for k, v in body.items() if v not in (None, "")}).encode()
        results: list[_Ran | None] = [None] * len(unique)

        async def one(index: int, hook: HookCommand) -> None:
            reason = self.denied(hook.command, permissions)
            if reason:
                results[index] = _Ran(hook, failure=f"hook {hook.command!r} not run: {reason}")
                return
            results[index] = await run_hook(
                hook,
                payload,
                cwd=self.working_dir,
                env=self.env,
                shell=self.shell,
                processes=self.processes,
            )

        async with trio.open_nursery() as nursery:
            for index, hook in enumerate(unique):
                nursery.start_soon(one, index, hook)
        return combine([r for r in results if r is not None], event)


def tool_fields(
    session_id: str, name: str, call_id: str, arguments: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "tool_name": name,
        "tool_use_id": call_id,
        "tool_input": dict(arguments) if arguments is not None else None,
    }


def failure_warning(outcome: HookOutcome) -> str:
    """The warning text for hooks that timed out or could not start ("" when none)."""
    return "\n".join(outcome.failures)
