"""The child process of code mode: runs one JavaScript script in QuickJS (decision 0032).

Run as ``python -I _js_worker.py`` by ``_js_sandbox.py``; it imports only the standard library
and ``quickjs``, never greenroom. It speaks JSON lines: the first line on stdin is the job
(``script``, ``functions``, ``memory``, ``stack``, ``cpu``); on stdout it writes ``{"call":
name, "arguments": json}`` for each tool call and reads the reply (``{"output": text}`` or
``{"error": text}``) from stdin; ``{"console": "stdout"|"stderr", "text": ...}`` for each
console line; and last ``{"value": text}`` or ``{"failed": text}``.

The limits: the script's heap (QuickJS's memory limit), its stack, and the CPU seconds of
this process (``RLIMIT_CPU``: SIGXCPU, then SIGKILL a second later). Time spent waiting for a
tool's result uses no CPU, so it does not count. QuickJS's own time limit cannot be used: it
refuses every call into Python while it is set.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# The prelude defines console and one function per tool. The Python callables never raise
# (an exception crossing into QuickJS leaves the binding in an error state): they return JSON
# and the JavaScript side throws.
PRELUDE = r"""
(() => {
  const send = __greenroom_call, print = __greenroom_print;
  const show = (v) => {
    if (typeof v === "string") return v;
    if (v === undefined) return "undefined";
    if (v instanceof Error) return String(v);
    try { const s = JSON.stringify(v); return s === undefined ? String(v) : s; }
    catch (e) { return String(v); }
  };
  const line = (stream) => (...args) => { print(stream, args.map(show).join(" ")); };
  globalThis.console = {
    log: line("stdout"), info: line("stdout"), debug: line("stdout"),
    trace: line("stdout"), warn: line("stdout"), error: line("stderr"),
  };
  const tool = (name) => function (args) {
    const reply = JSON.parse(send(name, JSON.stringify(args === undefined ? {} : args) ?? "{}"));
    if ("error" in reply) throw new Error(reply.error);
    return reply.output;
  };
  for (const name of __greenroom_functions) globalThis[name] = tool(name);
})();
"""

RESULT = (
    "(() => { const v = __greenroom_result;"
    ' if (v === undefined || v === null) return "";'
    ' if (typeof v === "string") return v;'
    " try { const s = JSON.stringify(v); return s === undefined ? String(v) : s; }"
    " catch (e) { return String(v); } })()"
)


def _write(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def _call(name: Any, arguments: Any) -> str:
    try:
        _write({"call": str(name), "arguments": str(arguments)})
        reply = sys.stdin.buffer.readline()
    except Exception:
        os._exit(3)
    if not reply:
        os._exit(3)  # the server went away: nothing to return to
    return reply.decode()


def _print(stream: Any, text: Any) -> None:
    try:
        _write({"console": "stderr" if stream == "stderr" else "stdout", "text": str(text)})
    except Exception:
        os._exit(3)


def _limit_cpu(seconds: int) -> None:
    try:
        import resource
    except ImportError:  # not a POSIX system: the server's wall-clock budget still applies
        return
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    except (ValueError, OSError):  # a lower hard limit: the server's wall-clock budget applies
        pass


def main() -> None:
    job = json.loads(sys.stdin.buffer.readline())
    _limit_cpu(int(job["cpu"]))
    import quickjs  # type: ignore[import-untyped]

    ctx = quickjs.Context()
    ctx.set_memory_limit(int(job["memory"]))
    ctx.set_max_stack_size(int(job["stack"]))
    ctx.add_callable("__greenroom_call", _call)
    ctx.add_callable("__greenroom_print", _print)
    ctx.set("__greenroom_functions", ctx.parse_json(json.dumps(list(job["functions"]))))
    ctx.eval(PRELUDE)
    # On one line with the script's first line, so the error positions are the script's.
    wrapped = "var __greenroom_result = (() => {" + job["script"] + "\n})();"
    try:
        ctx.eval(wrapped)
        value = ctx.eval(RESULT)
    except Exception as exc:  # JSException, StackOverflow: the script failed
        text = str(exc).strip()
        if text in ("", "null"):  # what QuickJS throws when it has no memory left for an Error
            mib = int(job["memory"]) / (1024 * 1024)
            text = f"{text or 'nothing'} was thrown: out of memory? (the limit is {mib:g} MiB)"
        _write({"failed": text})
        return
    _write({"value": value if isinstance(value, str) else ""})


if __name__ == "__main__":
    main()
