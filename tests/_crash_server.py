"""``greenroom serve`` for the crash tests (not a test module): ``_crash_server.py serve ...``.

The real command line, plus one toolset type, ``side_effect``, for the crash harness: its tool
appends ``<call> <pid>`` to the file named by ``$GREENROOM_SIDE_EFFECTS`` (one ``O_APPEND``
write, so a line is whole or absent), then waits ``sleep`` seconds and, while the file named by
``$GREENROOM_HOLD_FILE`` exists, until it is removed. ``call`` and ``sleep`` are the call's
arguments (the fake model puts the tool call's id in ``call``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import trio

from greenroom.agents._tools import TOOLSET_BUILDERS, FunctionTool, Tool, ToolResult
from greenroom.agents.providers._base import ToolSpec
from greenroom.cli import main

HOLD_POLLS = 6000  # at most two minutes of holding

SPEC = ToolSpec(
    name="side_effect",
    description="Does something that must not happen twice: records the call in a file.",
    parameters={
        "type": "object",
        "properties": {"call": {"type": "string"}, "sleep": {"type": "number"}},
        "required": ["call"],
    },
)


async def side_effect(arguments: Mapping[str, Any]) -> ToolResult:
    call = str(arguments.get("call", "?"))
    fd = os.open(os.environ["GREENROOM_SIDE_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{call} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    await trio.sleep(float(arguments.get("sleep", 0)))  # real clock: the tool takes a while
    hold = os.environ.get("GREENROOM_HOLD_FILE", "")
    for _ in range(HOLD_POLLS if hold else 0):  # another process removes the file: poll it
        if not await trio.Path(hold).exists():
            break
        await trio.sleep(0.02)  # real clock: until the test lets the tool finish
    return ToolResult(f"side effect {call} done")


def side_effect_toolset(_: Any) -> list[Tool]:
    return [FunctionTool(SPEC, side_effect)]


TOOLSET_BUILDERS["side_effect"] = side_effect_toolset

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
