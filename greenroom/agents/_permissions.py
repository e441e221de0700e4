"""Whether a tool call runs, asks the user first, or is refused (spec §3).

The checks, in order; the first that decides wins:

1. permission rules: the session's, then the agent file's. Within one rule set a ``deny``
   pattern refuses, else an ``allow`` pattern runs, else an ``ask`` pattern asks (even a
   read-only tool);
2. the tool's ``readOnlyHint``: runs;
3. the session's approvals: an unexpired ``approve-tool`` grant for this tool or an unexpired
   ``approve-session`` grant, or ``tools_approved``: runs;
4. the session's ``safety_policy``: ``autonomous`` runs, ``restricted`` refuses (fail-closed),
   ``strict``/``balanced``/none ask (``balanced`` only lets safe — read-only — tools through,
   and those were let through at step 2);
5. ask.

Patterns: ``tool`` or ``tool:arg=value[:arg2=value2]`` (the first ``:key=value`` starts the
argument part, so ``mcp:github:create_issue`` is a plain name); case-insensitive; a pattern
ending in ``*`` with no other wildcard is a prefix match (``shell:cmd=sudo*``), otherwise a
shell glob where ``*`` and ``?`` do not cross ``/``. Argument values are compared as text
(booleans ``true``/``false``, integral numbers without decimals); a pattern with an argument
condition never matches a call without that argument.

Commands (issue 23): for a tool that runs a process (``decide(..., command=...)``), the rule
name ``shell`` in a ``deny`` or ``ask`` pattern covers the call whatever the tool is called (an
``allow`` names the tool it allows), and a ``cmd=`` condition is matched
against each simple command of the parsed command line (``_command_parse``), never the raw text:
a ``deny`` matches if ANY simple command matches; an ``allow`` applies only if EVERY simple
command is allowed (and writes no file through a redirection); when the line is not understood
or a program cannot be known, a rule set with ``cmd=`` rules for the call asks. ``cmd=X *``
also covers a bare ``X``. :func:`decide_command` is the entry point for hooks.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import attrs

from greenroom.domain import Approval, Permissions, Session

from ._command_parse import ParsedCommand, SimpleCommand, parse_command


class Decision(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@attrs.frozen
class Verdict:
    """A decision and where it came from (``source``: a stable name, e.g. for audits)."""

    decision: Decision
    source: str
    message: str = ""  # the tool error text for a refusal
    rule: str = ""  # for a person: the pattern or policy that decided (``ask: shell (…)``)


PROCESS_TOOL = "shell"  # the rule name that covers every tool running a process
SESSION_RULES = "session permissions"
FILE_RULES = "permissions configuration"


def _glob_regex(glob: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(glob):
        ch = glob[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = glob[i + 1 : end]
                if body.startswith(("!", "^")):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        elif ch == "\\" and i + 1 < len(glob):
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@lru_cache(maxsize=1024)
def _value_matcher(pattern: str) -> re.Pattern[str] | str:
    """A prefix (str) for ``abc*`` patterns, else a compiled case-insensitive glob."""
    lowered = pattern.lower()
    if lowered.endswith("*") and not any(c in lowered[:-1] for c in "*?["):
        return lowered[:-1]
    try:
        return re.compile(_glob_regex(lowered) + r"\Z", re.DOTALL)
    except re.error:
        return re.compile(re.escape(lowered) + r"\Z")


def _value_matches(pattern: str, value: str) -> bool:
    matcher = _value_matcher(pattern)
    text = value.lower()
    if isinstance(matcher, str):
        return text.startswith(matcher)
    return matcher.match(text) is not None


def _split(pattern: str) -> tuple[str, list[tuple[str, str]]]:
    """``tool:a=1:b=x`` → ``("tool", [("a", "1"), ("b", "x")])``."""
    parts = pattern.split(":")
    for index in range(1, len(parts)):
        if "=" in parts[index]:
            conditions = []
            for part in parts[index:]:
                key, _, value = part.partition("=")
                conditions.append((key.strip(), value))
            return ":".join(parts[:index]), conditions
    return pattern, []


def as_text(value: Any) -> str:
    """An argument value as patterns see it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _tool_matches(tool: str, name: str, runs_command: bool) -> bool:
    return _value_matches(tool, name) or (runs_command and _value_matches(tool, PROCESS_TOOL))


def _has_cmd(conditions: list[tuple[str, str]]) -> bool:
    return any(key.lower() == "cmd" for key, _ in conditions)


def _other_conditions_match(
    conditions: list[tuple[str, str]], arguments: Mapping[str, Any] | None
) -> bool:
    lowered = {k.lower(): v for k, v in (arguments or {}).items()}
    for key, expected in conditions:
        if key.lower() == "cmd":
            continue
        if key.lower() not in lowered:
            return False
        if not _value_matches(expected, as_text(lowered[key.lower()])):
            return False
    return True


def _command_matches(conditions: list[tuple[str, str]], command: SimpleCommand) -> bool:
    """Whether every ``cmd=`` condition covers ``command`` (``rm *`` covers a bare ``rm``)."""
    text = command.text
    return all(
        _value_matches(expected, text) or _value_matches(expected, text + " ")
        for key, expected in conditions
        if key.lower() == "cmd"
    )


def _command_rules(
    label: str,
    perms: Permissions,
    name: str,
    arguments: Mapping[str, Any] | None,
    parsed: ParsedCommand,
) -> Verdict | None:
    """One rule set's verdict on a call that runs ``parsed`` (see the module docstring)."""
    key = "session" if label == SESSION_RULES else "team"

    def applicable(patterns: Iterable[str], alias: bool) -> list[list[tuple[str, str]]]:
        out = []
        for pattern in patterns:
            tool, conditions = _split(pattern.strip())
            if _tool_matches(tool, name, alias) and _other_conditions_match(conditions, arguments):
                out.append(conditions)
        return out

    # ``shell`` stands for every process tool in what refuses or asks; an allow names its tool
    # (an approve-tool grant of ``shell`` does not also allow background jobs or scripts).
    deny, ask = applicable(perms.deny, True), applicable(perms.ask, True)
    allow = applicable(perms.allow, False)
    known = [c for c in parsed.commands if not c.opaque]
    for conditions in deny:
        if not _has_cmd(conditions) or any(_command_matches(conditions, c) for c in known):
            return Verdict(
                Decision.DENY, f"{key}_permissions_deny", f"Tool '{name}' is denied by {label}."
            )
    if not parsed.certain and any(_has_cmd(c) for c in (*deny, *allow, *ask)):
        return Verdict(Decision.ASK, f"{key}_permissions_unparsed")

    def allowed(command: SimpleCommand) -> bool:
        return any(
            not _has_cmd(c) or (not command.writes and _command_matches(c, command)) for c in allow
        )

    if allow and all(allowed(c) for c in parsed.commands):
        return Verdict(Decision.ALLOW, f"{key}_permissions_allow")
    for conditions in ask:
        if not _has_cmd(conditions) or any(_command_matches(conditions, c) for c in known):
            return Verdict(Decision.ASK, f"{key}_permissions_ask")
    return None


def matches(pattern: str, name: str, arguments: Mapping[str, Any] | None) -> bool:
    """Whether permission ``pattern`` covers a call of ``name`` with ``arguments``."""
    tool, conditions = _split(pattern.strip())
    if not _value_matches(tool, name):
        return False
    for key, expected in conditions:
        lowered = {k.lower(): v for k, v in (arguments or {}).items()}
        if key.lower() not in lowered:
            return False
        if not _value_matches(expected, as_text(lowered[key.lower()])):
            return False
    return True


def _any(patterns: Iterable[str], name: str, arguments: Mapping[str, Any] | None) -> bool:
    return any(matches(p, name, arguments) for p in patterns)


def _first(patterns: Iterable[str], name: str, arguments: Mapping[str, Any] | None) -> str:
    return next((p for p in patterns if matches(p, name, arguments)), "")


def rule_verdict(
    name: str,
    arguments: Mapping[str, Any] | None,
    rules: Iterable[tuple[str, Permissions | None]],
    command: str | None = None,
) -> Verdict | None:
    """The verdict of the first rule set with a pattern covering the call, if any.

    ``command``: the shell command text the call runs, for a tool that runs a process.
    """
    for label, perms in rules:
        if perms is None:
            continue
        if command is not None:
            verdict = _command_rules(label, perms, name, arguments, parse_command(command))
            if verdict is not None:
                return verdict
            continue
        key = "session" if label == SESSION_RULES else "team"
        if _any(perms.deny, name, arguments):
            return Verdict(
                Decision.DENY, f"{key}_permissions_deny", f"Tool '{name}' is denied by {label}."
            )
        if _any(perms.allow, name, arguments):
            return Verdict(Decision.ALLOW, f"{key}_permissions_allow")
        asking = _first(perms.ask, name, arguments)
        if asking:
            return Verdict(Decision.ASK, f"{key}_permissions_ask", rule=f"ask: {asking} ({label})")
    return None


def active_grant(approvals: Iterable[Approval], name: str, now: dt.datetime) -> Approval | None:
    """The newest unexpired ``approve-tool`` grant for ``name`` or ``approve-session`` grant."""
    for approval in reversed(tuple(approvals)):
        if approval.decision not in ("approve-tool", "approve-session"):
            continue
        if approval.expires_at is not None and approval.expires_at <= now:
            continue
        if approval.decision == "approve-session" or approval.grant.lower() == name.lower():
            return approval
    return None


def decide(
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    session: Session,
    file_permissions: Permissions | None,
    read_only: bool,
    now: dt.datetime,
    command: str | None = None,
) -> Verdict:
    """Decide what happens to a call (see the module docstring for the order).

    ``command``: the shell command text the call runs, when the tool runs a process (shell,
    background jobs, script tools, hooks); rules then apply to its parsed simple commands.
    """
    ruled = rule_verdict(
        name,
        arguments,
        ((SESSION_RULES, session.permissions), (FILE_RULES, file_permissions)),
        command,
    )
    if ruled is not None:
        return ruled
    if read_only:
        return Verdict(Decision.ALLOW, "readonly_hint")
    if active_grant(session.approvals, name, now) is not None:
        return Verdict(Decision.ALLOW, "session_approval")
    policy = session.safety_policy
    if session.tools_approved or policy == "autonomous":
        return Verdict(Decision.ALLOW, "mode_autonomous")
    if policy == "restricted":
        return Verdict(
            Decision.DENY,
            "mode_restricted",
            f"Tool '{name}' is denied by the session's restricted safety policy.",
        )
    rule = f"no rule allows {name}, and the safety policy ({policy or 'default'}) asks"
    return Verdict(Decision.ASK, f"mode_{policy or 'default'}", rule=rule)


def decide_command(
    command: str,
    *,
    session: Session,
    file_permissions: Permissions | None,
    now: dt.datetime,
    name: str = PROCESS_TOOL,
    arguments: Mapping[str, Any] | None = None,
) -> Verdict:
    """The decision for running shell ``command`` (hooks and other process runners)."""
    return decide(
        name,
        {"cmd": command} if arguments is None else arguments,
        session=session,
        file_permissions=file_permissions,
        read_only=False,
        now=now,
        command=command,
    )
