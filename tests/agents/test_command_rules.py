"""Permission rules on parsed shell commands (issue 23): adversarial rewrites, generated.

A deny rule ``shell:cmd=rm *`` must hold against every way of spelling, wrapping or chaining
``rm`` (it is refused, or at worst asked about when the program cannot be known); an allow rule
``shell:cmd=echo *`` must let no chain through without a question. Pure functions: no runtime.
"""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from greenroom.agents import Decision, ToolContext, ToolsetConfig, decide, decide_command
from greenroom.agents._command_parse import parse_command
from greenroom.agents._permissions import Verdict
from greenroom.agents.tools import build_tools, command_of
from greenroom.domain import Permissions, Session

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
DENY_RM = Permissions(deny=["shell:cmd=rm *"])
ALLOW_ECHO = Permissions(allow=["shell:cmd=echo *"])
AUTONOMOUS = Session.new(safety_policy="autonomous")


def verdict(
    cmd: str, session: Session, rules: Permissions | None = None, name: str = "shell"
) -> Verdict:
    return decide(
        name,
        {"cmd": cmd},
        session=session,
        file_permissions=rules,
        read_only=False,
        now=NOW,
        command=cmd,
    )


# The rewrites of the black-box probe (issue 23, item 1), each must be refused outright.
PROBE_REWRITES = [
    " rm -rf x",
    "\trm -rf x",
    "\\rm -rf x",
    "'rm' -rf x",
    '"rm" -rf x',
    "/bin/rm -rf x",
    "command rm -rf x",
    "env rm -rf x",
    "true && rm -rf x",
    "echo x; rm -rf x",
    "sh -c 'rm -rf x'",
    'bash -c "rm -rf x"',
    "find . -delete",
    "find . -name x -exec rm {} \\;",
    "unlink x",
    "r''m x",
    "$'\\x72m' x",
    "ls | xargs rm",
    "exec rm x",
    "X=1 rm x",
    "env -i A=1 nice -n 5 timeout 5 rm x",
    "eval 'rm x'",
    "(rm x)",
    "{ rm x; }",
    "f() { rm x; }; f",
    "echo `rm x`",
    "echo $(rm x)",
    "cat <(rm x)",
    "if true; then rm x; fi",
    "sudo rm x",
    "echo hi\nrm x",
    "! rm x",
]


@pytest.mark.parametrize("cmd", PROBE_REWRITES)
def test_deny_holds_against_the_probe_rewrites(cmd: str) -> None:
    assert verdict(cmd, AUTONOMOUS, DENY_RM).decision is Decision.DENY


@pytest.mark.parametrize(
    "cmd", ["$(echo rm) -rf x", "`echo rm` x", "$RM x", "/bin/r? x", "echo rm x | sh", "eval $X"]
)
def test_a_program_that_cannot_be_known_asks_under_a_deny_rule(cmd: str) -> None:
    got = verdict(cmd, AUTONOMOUS, DENY_RM)
    assert got.decision is Decision.ASK
    assert got.source == "team_permissions_unparsed"


def test_unparseable_text_asks() -> None:
    got = verdict("if [ ; then rm", AUTONOMOUS, DENY_RM)
    assert (got.decision, got.source) == (Decision.ASK, "team_permissions_unparsed")


def test_other_programs_still_run_under_a_deny_rule() -> None:
    assert verdict("ls -la; echo rm", AUTONOMOUS, DENY_RM).decision is Decision.ALLOW
    assert verdict("rmdir x", AUTONOMOUS, DENY_RM).decision is Decision.ALLOW


# --- generated rewrites ---------------------------------------------------------------------

SPELLINGS = ["rm", "\\rm", "'rm'", '"rm"', "/bin/rm", "/usr/bin/rm", "r''m", "$'rm'", "./rm"]
PREFIXES = ["", " ", "\t", "command ", "env ", "env X=1 ", "exec ", "nice -n 5 ", "timeout 5 ",
            "X=1 ", "sudo ", "nohup ", "builtin ", "stdbuf -o0 ", "setsid "]  # fmt: skip
ARGS = ["-rf x", "x", "-- x", "-f '/a b'", '"$HOME"/x', ""]


def wrap(kind: int, inner: str) -> str:
    return [
        lambda s: f"true && {s}",
        lambda s: f"echo x; {s}",
        lambda s: f"false || {s}",
        lambda s: f"ls | {s}",
        lambda s: f"( {s} )",
        lambda s: f"{{ {s}; }}",
        lambda s: f"echo $( {s} )",  # "$((" would be arithmetic
        lambda s: f"sh -c {shlex.quote(s)}",
        lambda s: f"bash -lc {shlex.quote(s)}",
        lambda s: f"eval {shlex.quote(s)}",
        lambda s: f"echo x\n{s}",
        lambda s: f"if true; then {s}; fi",
        lambda s: f"for i in 1; do {s}; done",
        lambda s: f"f() {{ {s}; }}; f",
        lambda s: f"{s} & wait",
        lambda s: f"cat <({s})",
    ][kind](inner)


@st.composite
def rm_rewrites(draw: st.DrawFn) -> str:
    cmd = draw(st.sampled_from(PREFIXES)) + draw(st.sampled_from(SPELLINGS))
    args = draw(st.sampled_from(ARGS))
    cmd = f"{cmd} {args}" if args else cmd
    for kind in draw(st.lists(st.integers(0, 15), max_size=3)):
        cmd = wrap(kind, cmd)
    return cmd


@settings(max_examples=300, deadline=None)
@given(rm_rewrites())
def test_generated_rewrites_of_rm_are_denied(cmd: str) -> None:
    got = verdict(cmd, AUTONOMOUS, DENY_RM)
    assert got.decision is Decision.DENY, (cmd, got)


OTHERS = ["touch X", "rm -rf x", "curl http://x", "sh", "python3 -c 1", "git push", "chmod 777 x"]
SEPARATORS = ["; ", " && ", " || ", " | ", "\n", " & "]


@st.composite
def echo_chains(draw: st.DrawFn) -> str:
    echo = "echo " + draw(st.sampled_from(["hi", "'a b'", "x y z", "-n hi"]))
    other = draw(st.sampled_from(OTHERS))
    form = draw(st.integers(0, 4))
    if form == 0:
        return echo + draw(st.sampled_from(SEPARATORS)) + other
    if form == 1:
        return other + draw(st.sampled_from(SEPARATORS)) + echo
    if form == 2:
        return f"{echo} $({other})"
    if form == 3:
        return f"{echo} `{other}`"
    return f"{echo} > {draw(st.sampled_from(['f', '~/.bashrc', '/etc/passwd']))}"


@settings(max_examples=200, deadline=None)
@given(echo_chains())
def test_an_allow_rule_lets_no_chain_through(cmd: str) -> None:
    got = verdict(cmd, Session.new(), ALLOW_ECHO)
    assert got.decision is Decision.ASK, (cmd, got)


@pytest.mark.parametrize("cmd", ["echo hi", "echo 'a; b'", "echo hi && echo there", "echo"])
def test_an_allow_rule_allows_what_it_names(cmd: str) -> None:
    got = verdict(cmd, Session.new(), ALLOW_ECHO)
    assert (got.decision, got.source) == (Decision.ALLOW, "team_permissions_allow")


def test_git_status_prefix_does_not_allow_a_chain() -> None:
    rules = Permissions(allow=["shell:cmd=git status*"])
    assert verdict("git status; touch X", Session.new(), rules).decision is Decision.ASK
    assert verdict("git status --short", Session.new(), rules).decision is Decision.ALLOW


def test_an_ask_rule_on_one_simple_command_asks() -> None:
    rules = Permissions(ask=["shell:cmd=git push*"])
    got = verdict("make && git push origin", AUTONOMOUS, rules)
    assert (got.decision, got.source) == (Decision.ASK, "team_permissions_ask")


# --- every process-running tool ---------------------------------------------------------


def test_deny_shell_covers_background_jobs(tmp_path: Path) -> None:
    ctx = ToolContext(working_dir=tmp_path, env={"PATH": "/usr/bin:/bin"})
    toolset = build_tools([ToolsetConfig("shell", {})], ctx)
    try:
        job = toolset.tools["run_background_job"]
        args = {"cmd": "sleep 100"}
        assert command_of(job, args) == "sleep 100"
        for rules in (Permissions(deny=["shell"]), Permissions(deny=["shell:cmd=sleep *"])):
            got = decide(
                "run_background_job",
                args,
                session=AUTONOMOUS,
                file_permissions=rules,
                read_only=False,
                now=NOW,
                command=command_of(job, args),
            )
            assert got.decision is Decision.DENY
        assert command_of(toolset.tools["view_background_job"], {"job_id": "x"}) is None
    finally:
        toolset.close()


def test_script_tools_are_checked_by_their_command(tmp_path: Path) -> None:
    ctx = ToolContext(working_dir=tmp_path, env={"PATH": "/usr/bin:/bin"})
    options = {"shell": {"clean": {"cmd": "rm -rf $dir", "args": {"dir": {"type": "string"}}}}}
    toolset = build_tools([ToolsetConfig("script", options)], ctx)
    tool = toolset.tools["clean"]
    args = {"dir": "build"}
    assert command_of(tool, args) == "rm -rf $dir"
    got = decide(
        "clean",
        args,
        session=AUTONOMOUS,
        file_permissions=DENY_RM,
        read_only=False,
        now=NOW,
        command=command_of(tool, args),
    )
    assert got.decision is Decision.DENY


def test_decide_command_is_the_hooks_entry_point() -> None:
    assert (
        decide_command("true && rm x", session=AUTONOMOUS, file_permissions=DENY_RM, now=NOW)
    ).decision is Decision.DENY
    assert (
        decide_command("ls", session=AUTONOMOUS, file_permissions=DENY_RM, now=NOW)
    ).decision is Decision.ALLOW


def test_the_parser_normalises_programs() -> None:
    parsed = parse_command("X=1 \\/usr/bin/'r'm -rf \"a b\" | tee out")
    assert parsed.certain
    assert [c.text for c in parsed.commands] == ["rm -rf a b", "tee out"]


def test_shell_stands_for_every_process_tool_in_deny_and_ask_but_not_in_allow() -> None:
    for name in ("run_background_job", "deploy"):  # a background job, a script tool

        def got(rules: Permissions, name: str = name) -> Decision:
            return verdict("make all", Session.new(), rules, name=name).decision

        assert got(Permissions(deny=["shell"])) is Decision.DENY
        assert got(Permissions(ask=["shell:cmd=make *"])) is Decision.ASK
        # An approve-tool grant of "shell" (an allow rule) does not widen to other tools.
        assert got(Permissions(allow=["shell"])) is Decision.ASK
        assert got(Permissions(allow=[f"{name}:cmd=make *"])) is Decision.ALLOW
