"""Running one JavaScript script of code mode in a child process (decision 0032).

The script runs in QuickJS inside ``python -I _js_worker.py``: a process of its own, in a new
process group watched like a tool's (killed if the server dies, recorded in the tool process
ledger), with an empty environment. The script sees the functions it is given and ``console``,
nothing else: no file, no network, no process. Each function call is handed to ``call_tool``
here, in the server, and the script waits for its result.

Limits (:class:`Limits`): the script's heap and stack (QuickJS) and the CPU seconds of the child
(``RLIMIT_CPU``); waiting for a tool uses no CPU, so a call waiting for a person's approval is
never cut short. A wall-clock budget of the time the script runs *between* tool calls is the
backstop. When the caller is cancelled the child is killed at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from .tools._base import OUTPUT_LIMIT, ProcessLedger, limit_output
from .tools._process import forget_ended, kill_group, track

WORKER = str(Path(__file__).with_name("_js_worker.py"))
MAX_LINE = 16 * 1024 * 1024
"""Bytes of one message from the child (a tool call's arguments, a console line)."""

CallTool = Callable[[str, str], Awaitable[tuple[bool, str]]]
"""``(function name, arguments as JSON text)`` → ``(ok, output or error text)``."""


@attrs.frozen
class Limits:
    """What one script may use."""

    cpu_seconds: int = 10
    memory_bytes: int = 128 * 1024 * 1024
    stack_bytes: int = 1024 * 1024
    console_bytes: int = OUTPUT_LIMIT
    """Of stdout and of stderr each; the rest is cut with the tools' truncation note."""

    @property
    def wall_seconds(self) -> float:
        """The backstop: seconds the script may run between tool calls, on the wall clock."""
        return self.cpu_seconds * 4 + 10.0


@attrs.frozen
class Outcome:
    """How a script ended: its value, or why it failed; what it printed."""

    value: str
    stdout: str = ""
    stderr: str = ""
    failed: bool = False


class _Lines:
    """JSON messages from the child's stdout, one a line."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def next(self) -> dict[str, Any] | None:
        """The next message; None at the end of the stream. Raises ValueError when a line is
        too long or not a JSON object."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError("not a JSON object")
                return message
            if len(self._buffer) > MAX_LINE:
                raise ValueError("a message of the script is too long")
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                return None
            self._buffer.extend(chunk)


@attrs.define
class _Console:
    limit: int
    out: list[str] = attrs.field(factory=list)
    err: list[str] = attrs.field(factory=list)
    sizes: list[int] = attrs.field(factory=lambda: [0, 0])

    def add(self, stream: str, text: str) -> None:
        slot = 1 if stream == "stderr" else 0
        if self.sizes[slot] > self.limit:
            return  # enough kept: the rest is dropped (the note says it was cut)
        line = text + "\n"
        (self.err if slot else self.out).append(line)
        self.sizes[slot] += len(line.encode())

    def outcome(self, value: str, failed: bool = False) -> Outcome:
        out = limit_output("".join(self.out), self.limit)
        err = limit_output("".join(self.err), self.limit)
        return Outcome(value, out, err, failed)


def _ended(returncode: int | None, limits: Limits) -> str:
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return f"the script ran out of time ({limits.cpu_seconds} s of CPU)"
    return f"the script's interpreter stopped unexpectedly (exit status {returncode})"


async def run_script(
    script: str,
    functions: Sequence[str],
    call_tool: CallTool,
    limits: Limits = Limits(),
    *,
    ledger: ProcessLedger | None = None,
) -> Outcome:
    """Run ``script`` with ``functions`` (each handed to ``call_tool``); see the module
    docstring. A script that throws, runs out of time or memory is a failed :class:`Outcome`.

    Raises:
        OSError: the interpreter could not be started.
    """
    await forget_ended()
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-I", WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=os.path.dirname(WORKER),
        env={},
        start_new_session=True,
    )
    await track(proc, ledger, "code mode script")
    console = _Console(limits.console_bytes)
    try:
        return await _converse(proc, script, functions, call_tool, limits, console)
    finally:
        if proc.returncode is None:
            kill_group(proc)
        for stream in (proc.stdin, proc.stdout):
            if isinstance(stream, trio.lowlevel.FdStream):
                stream.close()  # sync: safe in a cancelled task


async def _converse(
    proc: trio.Process,
    script: str,
    functions: Sequence[str],
    call_tool: CallTool,
    limits: Limits,
    console: _Console,
) -> Outcome:
    assert proc.stdin is not None and proc.stdout is not None
    stdin = proc.stdin
    job = {
        "script": script,
        "functions": list(functions),
        "memory": limits.memory_bytes,
        "stack": limits.stack_bytes,
        "cpu": limits.cpu_seconds,
    }
    lines = _Lines(proc.stdout)
    budget = limits.wall_seconds
    try:
        await stdin.send_all(json.dumps(job).encode() + b"\n")
        while True:
            started = trio.current_time()
            message: dict[str, Any] | None = None
            with trio.move_on_after(budget) as waited:  # tool calls are not in the budget
                message = await lines.next()
            if waited.cancelled_caught:
                kill_group(proc)
                return console.outcome(_ended(-signal.SIGKILL, limits), failed=True)
            budget -= trio.current_time() - started
            if message is None:
                await proc.wait()
                return console.outcome(_ended(proc.returncode, limits), failed=True)
            if "console" in message:
                console.add(str(message["console"]), str(message.get("text", "")))
            elif "call" in message:
                ok, text = await call_tool(str(message["call"]), str(message["arguments"]))
                reply = {"output": text} if ok else {"error": text}
                await stdin.send_all(json.dumps(reply).encode() + b"\n")
            elif "value" in message:
                return console.outcome(str(message["value"]))
            else:
                return console.outcome(str(message.get("failed", "")), failed=True)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError) as exc:
        return console.outcome(f"the script's interpreter failed: {exc}", failed=True)
