"""A watchdog process that kills the server's tool process groups when the server dies.

One small Python process per server process, started with the first tool process, in a session
of its own (a signal to the server's group does not reach it). The server writes ``+PGID`` when
a group starts and ``-PGID`` once it is empty, down a pipe only the server holds. When the
server dies, however it dies (``kill -9`` too), the kernel closes the pipe: the watchdog reads
end-of-file, sends SIGKILL to every group it still holds, and exits.

``PR_SET_PDEATHSIG`` on each tool process was the other way: it fires when the *thread* that
forked the child ends (trio forks in worker threads, which come and go), and it reaches only the
leader, not the processes the leader started. Records in the store (``_process_log``) cover the
case where the watchdog dies with the server: the next start kills what is left.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import threading

SCRIPT = r"""
import os, signal, sys
for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
groups = set()
for line in sys.stdin.buffer:
    try:
        pgid = int(line[1:])
    except ValueError:
        continue
    if line[:1] == b"+":
        groups.add(pgid)
    else:
        groups.discard(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""
MARKER = "greenroom-tool-watchdog"

_lock = threading.Lock()
_process: subprocess.Popen[bytes] | None = None
_groups: set[int] = set()


def _start() -> subprocess.Popen[bytes]:
    if _process is None:
        atexit.register(_stop)
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", SCRIPT, MARKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def _send(line: str) -> None:
    global _process
    for _ in range(2):
        if _process is None or _process.poll() is not None:
            _process = _start()
            assert _process.stdin is not None
            pending = "".join(f"+{g}\n" for g in _groups if f"+{g}\n" != line)
            if pending:
                os.write(_process.stdin.fileno(), pending.encode())
        assert _process.stdin is not None
        try:
            os.write(_process.stdin.fileno(), line.encode())
            return
        except BrokenPipeError:
            with contextlib.suppress(OSError):
                _process.kill()
            _process = None


def _stop() -> None:
    """At a normal exit: end-of-file for the watchdog, which kills what is left and exits."""
    global _process
    with _lock:
        proc, _process = _process, None
    if proc is None:
        return
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def watch(pgid: int) -> None:
    """Kill group ``pgid`` if this process dies before :func:`release`."""
    with _lock:
        _groups.add(pgid)
        _send(f"+{pgid}\n")


def release(pgid: int) -> None:
    """Group ``pgid`` is empty: forget it."""
    with _lock:
        if pgid in _groups:
            _groups.discard(pgid)
            _send(f"-{pgid}\n")


def watchdog_pid() -> int | None:
    """The watchdog's pid, None before the first tool process (for tests and diagnostics)."""
    return _process.pid if _process is not None and _process.poll() is None else None
