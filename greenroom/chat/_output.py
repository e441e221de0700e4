"""What ``greenroom chat`` prints: streamed tokens as they come, everything else as whole lines.

Colour comes from rich and follows ``NO_COLOR`` and dumb terminals; meaning never depends on
colour (every line says what it is). Model and tool output is printed as plain text, never
interpreted as markup.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

MAX_RESULT_LINES = 12


def plain_terminal(stream: TextIO = sys.stdout) -> bool:
    """A terminal that should get no colour and no full-screen tricks."""
    term = os.environ.get("TERM", "")
    return term in ("", "dumb") or not stream.isatty()


class Output:
    def __init__(self, stream: TextIO | None = None) -> None:
        stream = stream if stream is not None else sys.stdout
        no_color = bool(os.environ.get("NO_COLOR")) or plain_terminal(stream)
        self.console = Console(
            # None: whatever sys.stdout is when printing (prompt_toolkit's patch_stdout
            # replaces it while the input line is open).
            file=None if stream is sys.stdout else stream,
            no_color=no_color,
            highlight=False,
            emoji=False,
            soft_wrap=True,
            force_terminal=None if no_color else stream.isatty(),
        )
        self._stream = stream
        self._mid_line = False  # streamed text printed without its newline yet
        self._mode = ""  # "text" or "reasoning" while streaming
        # Beside an open input line a half-printed line would be drawn over by the prompt:
        # then streamed text prints a whole line at a time, and the line in progress is shown
        # by the prompt itself (``partial``; ``on_partial`` redraws it).
        self.hold_lines = False
        self.partial = ""
        self.on_partial: Callable[[], None] = lambda: None

    def line(self, text: str, style: str = "") -> None:
        """One whole line (ends a streamed reply's line first)."""
        self.end_stream()
        self.console.print(Text(text, style=style))

    def note(self, text: str) -> None:
        self.line(text, "dim")

    def error(self, text: str) -> None:
        self.line(f"error: {text}", "bold red")

    def token(self, text: str, *, reasoning: bool = False) -> None:
        """Streamed text, printed at once (reasoning is marked ``thinking:``)."""
        if self.hold_lines:
            self._held_token(text, reasoning)
            return
        mode = "reasoning" if reasoning else "text"
        if mode != self._mode:
            self.end_stream()
            label = "thinking: " if reasoning else "agent: "
            self.console.print(Text(label, style="dim" if reasoning else "bold"), end="")
            self._mode = mode
        self.console.print(Text(text, style="dim" if reasoning else ""), end="")
        self.console.file.flush()
        self._mid_line = not text.endswith("\n")

    def _held_token(self, text: str, reasoning: bool) -> None:
        mode = "reasoning" if reasoning else "text"
        if mode != self._mode:
            self.end_stream()
            self.partial = "thinking: " if reasoning else "agent: "
            self._mode = mode
        *done, rest = (self.partial + text).split("\n")
        for line in done:
            self.console.print(Text(line, style="dim" if reasoning else ""))
        self.partial = rest
        self.on_partial()

    def end_stream(self) -> None:
        if self.partial:
            partial, self.partial = self.partial, ""
            self.console.print(Text(partial, style="dim" if self._mode == "reasoning" else ""))
            self.on_partial()
        if self._mid_line:
            self.console.print()
        self._mid_line = False
        self._mode = ""

    def tool_call(self, call: dict[str, Any]) -> None:
        function = call.get("function") or {}
        self.line(f"tool call: {function.get('name', '?')} {compact(function.get('arguments'))}")

    def tool_result(self, text: str) -> None:
        lines = text.splitlines() or [""]
        shown = lines[:MAX_RESULT_LINES]
        self.line(f"tool result: {shown[0]}", "cyan")
        for extra in shown[1:]:
            self.line(f"  {extra}", "cyan")
        if len(lines) > MAX_RESULT_LINES:
            self.note(f"  ... {len(lines) - MAX_RESULT_LINES} more lines")


def compact(arguments: Any) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)
