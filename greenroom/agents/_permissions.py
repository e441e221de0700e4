"""Whether a tool call runs, asks the user first, or is refused.

Rules are tool-name patterns (``fnmatch``, case-sensitive). The session's rules are checked
before the agent file's; within one rule set ``deny`` beats ``allow`` beats ``ask``. With no
matching rule, an approved session (``tools_approved`` or the ``autonomous`` safety policy) or a
tool approved earlier in this runtime runs; otherwise the tool's own default decides.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from fnmatch import fnmatchcase

from greenroom.domain import Permissions, Session


class Decision(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def rule_decision(name: str, rules: Iterable[Permissions | None]) -> Decision | None:
    """The decision of the first rule set with a pattern matching ``name``, if any."""
    for perms in rules:
        if perms is None:
            continue
        if _matches(name, perms.deny):
            return Decision.DENY
        if _matches(name, perms.allow):
            return Decision.ALLOW
        if _matches(name, perms.ask):
            return Decision.ASK
    return None


def decide(
    name: str,
    *,
    session: Session,
    file_permissions: Permissions | None,
    needs_confirmation: bool,
    approved_tools: Collection[str] = (),
    approve_all: bool = False,
) -> Decision:
    """Decide what happens to a call of tool ``name`` (see the module docstring for the order)."""
    ruled = rule_decision(name, (session.permissions, file_permissions))
    if ruled is not None:
        return ruled
    if approve_all or session.tools_approved or session.safety_policy == "autonomous":
        return Decision.ALLOW
    if name in approved_tools:
        return Decision.ALLOW
    return Decision.ASK if needs_confirmation else Decision.ALLOW
