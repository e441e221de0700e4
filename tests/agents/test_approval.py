# ruff: noqa: E501  (the table reads best one row per line)
"""The approval order of spec §3 as a table: every row is one call and the verdict it gets.

Columns: the tool name and arguments, whether the tool is read-only, the session (rules,
approvals, tools_approved, safety policy), the agent file's rules, and the expected decision
and source. Pure functions only: no runtime, no clock but the ``NOW`` given.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from greenroom.agents import Decision, decide
from greenroom.agents._permissions import matches
from greenroom.domain import Approval, Permissions, Session

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
EARLIER = NOW - dt.timedelta(hours=1)
LATER = NOW + dt.timedelta(hours=1)


def grant(tool: str, *, decision: str = "approve-tool", expires: dt.datetime | None = None):
    return Approval(
        tool=tool, decision=decision, decided_at=EARLIER, grant=tool, expires_at=expires
    )


S = Session.new
P = Permissions
A, K, D = Decision.ALLOW, Decision.ASK, Decision.DENY
SHELL_LS = {"cmd": "ls -la"}

ROWS: list[tuple[str, str, dict[str, Any] | None, bool, Session, Permissions | None, Decision, str]] = [
    # name, tool, args, read_only, session, file rules, decision, source
    ("read-only runs", "read_file", {}, True, S(), None, A, "readonly_hint"),
    ("mutating asks", "shell", SHELL_LS, False, S(), None, K, "mode_default"),
    ("session deny beats read-only", "read_file", {}, True, S(permissions=P(deny=["read_*"])), None, D, "session_permissions_deny"),
    ("session allow", "shell", SHELL_LS, False, S(permissions=P(allow=["shell"])), None, A, "session_permissions_allow"),
    ("deny beats allow in one set", "shell", SHELL_LS, False, S(permissions=P(allow=["shell"], deny=["shell"])), None, D, "session_permissions_deny"),
    ("allow beats ask in one set", "shell", SHELL_LS, False, S(permissions=P(allow=["shell"], ask=["shell"])), None, A, "session_permissions_allow"),
    ("ask forces a question on a read-only tool", "read_file", {}, True, S(permissions=P(ask=["read_file"])), None, K, "session_permissions_ask"),
    ("session rules before the file's", "shell", SHELL_LS, False, S(permissions=P(allow=["shell"])), P(deny=["shell"]), A, "session_permissions_allow"),
    ("file deny", "shell", SHELL_LS, False, S(), P(deny=["shell"]), D, "team_permissions_deny"),
    ("file allow", "shell", SHELL_LS, False, S(), P(allow=["shell"]), A, "team_permissions_allow"),
    ("file ask on read-only", "read_file", {}, True, S(), P(ask=["read_file"]), K, "team_permissions_ask"),
    ("deny beats tools_approved", "shell", SHELL_LS, False, S(tools_approved=True, permissions=P(deny=["shell"])), None, D, "session_permissions_deny"),
    ("tools_approved runs", "shell", SHELL_LS, False, S(tools_approved=True), None, A, "mode_autonomous"),
    ("autonomous runs", "shell", SHELL_LS, False, S(safety_policy="autonomous"), None, A, "mode_autonomous"),
    ("balanced asks a mutating tool", "shell", SHELL_LS, False, S(safety_policy="balanced"), None, K, "mode_balanced"),
    ("balanced lets read-only through", "read_file", {}, True, S(safety_policy="balanced"), None, A, "readonly_hint"),
    ("strict asks", "shell", SHELL_LS, False, S(safety_policy="strict"), None, K, "mode_strict"),
    ("restricted refuses without asking", "shell", SHELL_LS, False, S(safety_policy="restricted"), None, D, "mode_restricted"),
    ("restricted still runs read-only", "read_file", {}, True, S(safety_policy="restricted"), None, A, "readonly_hint"),
    ("an allow rule beats restricted", "shell", SHELL_LS, False, S(safety_policy="restricted", permissions=P(allow=["shell"])), None, A, "session_permissions_allow"),
    ("tool grant runs", "shell", SHELL_LS, False, S(approvals=(grant("shell"),)), None, A, "session_approval"),
    ("tool grant covers its tool only", "write_file", {}, False, S(approvals=(grant("shell"),)), None, K, "mode_default"),
    ("unexpired grant runs", "shell", SHELL_LS, False, S(approvals=(grant("shell", expires=LATER),)), None, A, "session_approval"),
    ("expired grant asks again", "shell", SHELL_LS, False, S(approvals=(grant("shell", expires=NOW),)), None, K, "mode_default"),
    ("session grant covers every tool", "write_file", {}, False, S(approvals=(grant("", decision="approve-session", expires=LATER),)), None, A, "session_approval"),
    ("expired session grant asks", "write_file", {}, False, S(approvals=(grant("", decision="approve-session", expires=EARLIER),)), None, K, "mode_default"),
    ("a plain approve grants nothing", "shell", SHELL_LS, False, S(approvals=(grant("shell", decision="approve"),)), None, K, "mode_default"),
    ("grants do not beat a deny rule", "shell", SHELL_LS, False, S(approvals=(grant("shell"),)), P(deny=["shell"]), D, "team_permissions_deny"),
    ("restricted yields to a grant", "shell", SHELL_LS, False, S(safety_policy="restricted", approvals=(grant("shell"),)), None, A, "session_approval"),
    ("argument pattern allows", "shell", {"cmd": "git status"}, False, S(permissions=P(allow=["shell:cmd=git *"])), None, A, "session_permissions_allow"),
    ("argument pattern does not match", "shell", {"cmd": "rm -rf /"}, False, S(permissions=P(allow=["shell:cmd=git *"])), None, K, "mode_default"),
    ("argument pattern needs the argument", "shell", {}, False, S(permissions=P(allow=["shell:cmd=*"])), None, K, "mode_default"),
    ("prefix pattern", "shell", {"cmd": "sudo rm -rf /tmp/x"}, False, S(permissions=P(deny=["shell:cmd=sudo*"])), None, D, "session_permissions_deny"),
    ("case-insensitive", "Shell", {"CMD": "GIT log"}, False, S(permissions=P(allow=["shell:cmd=git *"])), None, A, "session_permissions_allow"),
    ("unparsable arguments match name-only rules", "shell", None, False, S(permissions=P(allow=["shell"])), None, A, "session_permissions_allow"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "args", "read_only", "session", "file_rules", "expected", "source"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_approval_matrix(tool, args, read_only, session, file_rules, expected, source) -> None:
    verdict = decide(
        tool, args, session=session, file_permissions=file_rules, read_only=read_only, now=NOW
    )
    assert (verdict.decision, verdict.source) == (expected, source)
    if expected is Decision.DENY:
        assert tool in verdict.message


def test_deny_messages_name_where_the_rule_lives() -> None:
    session = Session.new(permissions=Permissions(deny=["shell"]))
    verdict = decide("shell", {}, session=session, file_permissions=None, read_only=False, now=NOW)
    assert verdict.message == "Tool 'shell' is denied by session permissions."
    verdict = decide(
        "shell", {}, session=Session.new(), file_permissions=Permissions(deny=["shell"]),
        read_only=False, now=NOW,
    )  # fmt: skip
    assert verdict.message == "Tool 'shell' is denied by permissions configuration."


@pytest.mark.parametrize(
    ("pattern", "name", "args", "expected"),
    [
        ("shell", "shell", {}, True),
        ("shell", "shell_x", {}, False),
        ("read_*", "read_file", {}, True),
        ("mcp:github:create_issue", "mcp:github:create_issue", {}, True),
        ("shell:cmd=ls", "shell", {"cmd": "ls"}, True),
        ("shell:cmd=ls", "shell", {"cmd": "ls -l"}, False),
        ("shell:cmd=ls*", "shell", {"cmd": "ls -l"}, True),
        ("write_file:path=/etc/*", "write_file", {"path": "/etc/passwd"}, True),
        ("write_file:path=/etc/*", "write_file", {"path": "/etc/ssh/x"}, True),  # prefix
        ("write_file:path=/etc/*.conf", "write_file", {"path": "/etc/a.conf"}, True),
        ("write_file:path=/etc/*.conf", "write_file", {"path": "/etc/b/a.conf"}, False),
        ("fetch:timeout=30", "fetch", {"timeout": 30.0}, True),  # integral numbers as integers
        ("edit:force=true", "edit", {"force": True}, True),
        ("x:a=1:b=2", "x", {"a": 1, "b": 2}, True),
        ("x:a=1:b=2", "x", {"a": 1}, False),
        ("x?", "xy", {}, True),
        ("[ab]c", "bc", {}, True),
    ],
)
def test_patterns(pattern: str, name: str, args: dict[str, Any], expected: bool) -> None:
    assert matches(pattern, name, args) is expected
