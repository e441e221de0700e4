"""Recovery's kill of a process group an earlier server left (issue 23): a group whose
processes all exited (zombies an init never reaped) is not counted as killed, a running one is,
and a reused pid (another start time) is left alone. Real processes, the real clock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from greenroom.agents.tools._process import kill_recorded_group, start_ticks

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]  # real clock: a child that runs


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


def test_a_zombie_group_is_not_killed_a_running_one_is_and_a_reused_pid_is_left() -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while _state(done.pid) != "Z":  # exited, not yet collected: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.01)  # real clock: another process
        ticks = start_ticks(done.pid)
        assert ticks is not None
        assert kill_recorded_group(done.pid, ticks) is False
    finally:
        done.wait()

    running = subprocess.Popen(SLEEPER, start_new_session=True)
    try:
        ticks = start_ticks(running.pid)
        assert ticks is not None
        assert kill_recorded_group(running.pid, ticks + 1) is False  # another start: a reused pid
        assert running.poll() is None
        assert kill_recorded_group(running.pid, ticks) is True
        assert running.wait(timeout=30) == -signal.SIGKILL
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait()
