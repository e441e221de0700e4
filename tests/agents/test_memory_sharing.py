"""The memory toolset's database is shared by every session of an agent file (issue 23)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from greenroom.agents import Decision, ToolContext, ToolsetConfig, decide
from greenroom.agents.tools import build_tools
from greenroom.domain import Permissions, Session

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def test_shared_memory_reads_ask(tmp_path: Path) -> None:
    """Issue 23: the memory database is shared by every session of an agent file; reading it
    ran without a question (read-only), showing one session what another stored."""
    ctx = ToolContext(working_dir=tmp_path, data_dir=tmp_path / "data", agent_file="a.yaml")
    tools = build_tools([ToolsetConfig("memory", {})], ctx).tools
    for name in ("get_memories", "search_memories", "add_memory"):
        tool = tools[name]
        assert not tool.annotations.read_only
        got = decide(
            name, {}, session=Session.new(), file_permissions=None, read_only=False, now=NOW
        )
        assert got.decision is Decision.ASK
    allowed = Permissions(allow=["get_memories", "search_memories"])
    got = decide(
        "get_memories", {}, session=Session.new(), file_permissions=allowed, read_only=False,
        now=NOW,
    )  # fmt: skip
    assert got.decision is Decision.ALLOW
