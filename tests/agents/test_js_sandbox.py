"""Code mode's JavaScript sandbox: a real QuickJS child process per script (decision 0032).

Real clock (the child is a real process): every wait is bounded by ``trio.fail_after`` with a
``slow()`` deadline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio

from greenroom.agents._js_sandbox import Limits, run_script
from tests.slowness import slow

DEADLINE = slow(60)


class Recorder:
    """A ``call_tool`` that records the calls; ``fail`` names the tools that fail."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail = fail

    async def __call__(self, name: str, arguments: str) -> tuple[bool, str]:
        self.calls.append((name, json.loads(arguments)))
        if name in self.fail:
            return False, f"{name} refused"
        return True, f"{name} says {arguments}"


async def test_functions_console_and_value() -> None:
    tools = Recorder()
    script = """
      const a = read_file({path: "a.txt"});
      const b = globalThis["odd-name"]({n: 2, skip: undefined});
      console.log("read", a, {k: 1}, [1, 2]);
      console.info("info"); console.warn("warn"); console.debug("debug");
      console.error("bad", 3);
      return {a, b};
    """
    with trio.fail_after(DEADLINE):
        outcome = await run_script(script, ["read_file", "odd-name"], tools)
    assert not outcome.failed, outcome
    assert tools.calls == [("read_file", {"path": "a.txt"}), ("odd-name", {"n": 2})]
    assert json.loads(outcome.value) == {
        "a": 'read_file says {"path":"a.txt"}',
        "b": 'odd-name says {"n":2}',
    }
    printed = 'read read_file says {"path":"a.txt"} {"k":1} [1,2]\ninfo\nwarn\ndebug\n'
    assert outcome.stdout == printed
    assert outcome.stderr == "bad 3\n"


async def test_a_failed_tool_throws_and_an_uncaught_error_fails_the_script() -> None:
    tools = Recorder(fail=("shell",))
    script = """
      try { shell({cmd: "rm -rf /"}) } catch (e) { console.log("caught:", e.message) }
      const strings = ["x", 1, null, undefined].map(String).join(",");
      if (strings !== "x,1,null,undefined") return "wrong";
      shell({cmd: "again"});
      return "not reached";
    """
    with trio.fail_after(DEADLINE):
        outcome = await run_script(script, ["shell"], tools)
    assert outcome.failed
    assert outcome.value.startswith("Error: shell refused")
    assert outcome.stdout == "caught: shell refused\n"
    assert [name for name, _ in tools.calls] == ["shell", "shell"]


async def test_plain_values_syntax_errors_and_no_host_access() -> None:
    async def run(script: str) -> tuple[str, bool]:
        with trio.fail_after(DEADLINE):
            outcome = await run_script(script, [], Recorder())
        return outcome.value, outcome.failed

    assert await run("return 42") == ("42", False)
    assert await run("let x = 1") == ("", False)
    assert await run("return 'text'") == ("text", False)
    value, failed = await run("return )")
    assert failed and value.startswith("SyntaxError")
    probes = "return [typeof require, typeof std, typeof os, typeof fetch, typeof process]"
    assert await run(probes) == (json.dumps(["undefined"] * 5, separators=(",", ":")), False)


async def test_a_script_that_loops_forever_ends_within_its_cpu_limit() -> None:
    started = trio.current_time()
    with trio.fail_after(slow(40)):
        outcome = await run_script(
            "console.log('spinning'); while (true) {}", [], Recorder(), Limits(cpu_seconds=1)
        )
    assert outcome.failed
    assert outcome.value == "the script ran out of time (1 s of CPU)"
    assert outcome.stdout == "spinning\n"  # what it printed before is kept
    assert trio.current_time() - started < slow(40)


async def test_a_memory_blow_up_fails_the_script() -> None:
    script = "const a = []; while (true) { a.push('x'.repeat(1000) + a.length) }"
    with trio.fail_after(DEADLINE):
        outcome = await run_script(script, [], Recorder(), Limits(memory_bytes=16 * 1024 * 1024))
    assert outcome.failed
    assert "out of memory" in outcome.value


async def test_waiting_for_a_tool_does_not_count_against_the_cpu_limit() -> None:
    waited = trio.Event()

    async def slow_tool(name: str, arguments: str) -> tuple[bool, str]:
        # Real clock: longer than the script's whole CPU budget (a person deciding, say).
        with trio.move_on_after(1.5):
            await waited.wait()  # never set: the wait is the point
        return True, "late"

    with trio.fail_after(DEADLINE):
        outcome = await run_script("return ask({})", ["ask"], slow_tool, Limits(cpu_seconds=1))
    assert (outcome.value, outcome.failed) == ("late", False)


def children(marker: str) -> list[int]:
    """Processes whose parent is this one and whose command line has ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] != b"Z" and marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def test_a_cancelled_caller_kills_the_script() -> None:
    inside = trio.Event()

    async def blocking(name: str, arguments: str) -> tuple[bool, str]:
        inside.set()
        await trio.sleep_forever()
        raise AssertionError("not reached")

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_script, "return wait({})", ["wait"], blocking)
            await inside.wait()
            (child,) = children("_js_worker.py")
            exited = os.pidfd_open(child)
            nursery.cancel_scope.cancel()
        await gone(exited)


async def gone(pidfd: int) -> None:
    """Wait until the process of ``pidfd`` has exited (killed at once, reaped later)."""
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)
