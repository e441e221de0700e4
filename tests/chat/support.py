"""Driving ``greenroom chat`` in a real terminal: tmux send-keys and capture-pane.

Every wait polls the screen on the real clock (the program is another process) and is bounded.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid

import pytest
import trio

from tests.slowness import slow

POLL = 0.05  # seconds between screen captures (real clock)


def tmux_or_skip() -> None:
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is missing under CI: .ci/run must apt-get install tmux")
        pytest.skip("tmux is not installed (apt-get install tmux); CI fails instead")


class Tmux:
    """One detached tmux session running one command, 100x30."""

    def __init__(self) -> None:
        self.name = f"greenroom-test-{uuid.uuid4().hex[:8]}"
        self.started = False

    async def start(self, *argv: str, env: dict[str, str] | None = None) -> None:
        # Through env(1): tmux sets TERM in its panes itself, whatever -e says.
        settings = ["env", *(f"{k}={v}" for k, v in (env or {}).items())]
        await trio.run_process(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                self.name,
                "-x",
                "100",
                "-y",
                "30",
                *settings,
                *argv,
            ]
        )
        self.started = True

    async def type(self, text: str) -> None:
        """Literal text, then Enter."""
        await trio.run_process(["tmux", "send-keys", "-t", self.name, "-l", text])
        await self.keys("Enter")

    async def keys(self, *keys: str) -> None:
        await trio.run_process(["tmux", "send-keys", "-t", self.name, *keys])

    async def screen(self) -> str:
        done = await trio.run_process(
            ["tmux", "capture-pane", "-p", "-t", self.name, "-S", "-500"], capture_stdout=True
        )
        return done.stdout.decode()

    async def wait_for(self, pattern: str, *, within: float = slow(15)) -> str:
        """The screen once ``pattern`` (a regex, ``^``/``$`` per line) appears on it."""
        compiled = re.compile(pattern, re.MULTILINE)
        screen = ""
        with trio.move_on_after(within):
            while True:
                screen = await self.screen()
                if compiled.search(screen):
                    return screen
                await trio.sleep(POLL)  # real clock: polling another process's screen
        raise AssertionError(f"{pattern!r} did not appear within {within} s:\n{screen}")

    async def wait_closed(self, *, within: float = slow(15)) -> None:
        """Until the program has exited (tmux ends the session with it)."""
        with trio.fail_after(within):
            while True:
                done = await trio.run_process(["tmux", "has-session", "-t", self.name], check=False)
                if done.returncode != 0:
                    return
                await trio.sleep(POLL)  # real clock: waiting for another process

    async def close(self) -> None:
        if self.started:
            with trio.move_on_after(slow(5), shield=True):
                await trio.run_process(["tmux", "kill-session", "-t", self.name], check=False)


def chat_command(url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "greenroom.cli", "chat", url, *extra]
