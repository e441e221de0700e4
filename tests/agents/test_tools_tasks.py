"""The ``tasks`` toolset (spec §2.12): a JSON file of tasks with priorities and dependencies."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from greenroom.agents import ToolContext, ToolsetConfig, build_tools
from greenroom.agents.tools import ToolResult
from greenroom.agents.tools._registry import AgentTools


def tasks(tmp_path: Path, **options: Any) -> AgentTools:
    built = build_tools([ToolsetConfig("tasks", options)], ToolContext(working_dir=tmp_path))
    assert not built.warnings, built.warnings
    return built


async def call(tools: AgentTools, name: str, **args: Any) -> ToolResult:
    return await tools.tools[name].call(args)


async def create(tools: AgentTools, title: str, **args: Any) -> dict[str, Any]:
    result = await call(tools, "create_task", title=title, **args)
    assert not result.is_error, result.output
    task: dict[str, Any] = json.loads(result.output)
    return task


async def test_tasks_are_kept_in_a_private_json_file(tmp_path: Path) -> None:
    tools = tasks(tmp_path)
    task = await create(tools, "Write docs", description="all of them", priority="high")
    assert task["status"] == "pending" and task["dependencies"] == []
    assert task["createdAt"].endswith("Z")
    path = tmp_path / "tasks.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    stored = json.loads(path.read_text())
    assert stored == {"tasks": {task["id"]: task}}
    assert path.read_text().startswith('{\n  "tasks"')  # pretty-printed
    # another toolset on the same file (another session) sees it
    again = await call(tasks(tmp_path), "get_task", id=task["id"])
    assert json.loads(again.output) == {**task, "effectiveStatus": "pending"}


async def test_dependencies_block_and_next_task_picks_by_priority(tmp_path: Path) -> None:
    tools = tasks(tmp_path)
    base = await create(tools, "Base", priority="low")
    top = await create(tools, "Top", priority="critical", dependencies=[base["id"]])
    mid = await create(tools, "Mid", priority="medium")
    listed = json.loads((await call(tools, "list_tasks")).output)
    assert [t["title"] for t in listed] == ["Mid", "Base", "Top"]  # blocked last
    assert listed[-1]["effectiveStatus"] == "blocked"
    assert json.loads((await call(tools, "next_task")).output)["id"] == mid["id"]
    for task in (mid, base):
        await call(tools, "update_task", id=task["id"], status="done")
    assert json.loads((await call(tools, "next_task")).output)["id"] == top["id"]
    await call(tools, "update_task", id=top["id"], status="done")
    assert (await call(tools, "next_task")).output == (
        "No actionable tasks. Everything is either done or blocked."
    )
    blocked = json.loads(
        (await call(tools, "list_tasks", status="done", priority="critical")).output
    )
    assert [t["title"] for t in blocked] == ["Top"]


async def test_dependency_edits_refuse_cycles_and_deletes_clean_up(tmp_path: Path) -> None:
    tools = tasks(tmp_path)
    a = await create(tools, "A")
    b = await create(tools, "B", dependencies=[a["id"]])
    cycle = await call(tools, "add_dependency", taskId=a["id"], dependsOnId=b["id"])
    assert (cycle.is_error, cycle.output) == (True, "adding this dependency would create a cycle")
    again = await call(tools, "add_dependency", taskId=b["id"], dependsOnId=a["id"])
    assert again.output == "dependency already exists"
    removed = json.loads(
        (await call(tools, "remove_dependency", taskId=b["id"], dependsOnId=a["id"])).output
    )
    assert removed["dependencies"] == []
    await call(tools, "add_dependency", taskId=b["id"], dependsOnId=a["id"])
    deleted = await call(tools, "delete_task", id=a["id"])
    assert json.loads(deleted.output) == {"deleted": a["id"]}
    assert json.loads((await call(tools, "get_task", id=b["id"])).output)["dependencies"] == []
    assert (await call(tools, "list_tasks", status="blocked")).output == "null"


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("get_task", {"id": "nope"}, "task not found: nope"),
        ("create_task", {"title": "x", "priority": "urgent"}, "invalid priority: urgent"),
        (
            "create_task",
            {"title": "x", "dependencies": ["ghost"]},
            "dependency task not found: ghost",
        ),
        ("update_task", {"id": "nope", "status": "sleeping"}, "invalid status: sleeping"),
        ("delete_task", {"id": "nope"}, "task not found: nope"),
        (
            "create_task",
            {"title": "x", "path": "../outside.md"},
            "invalid file path: ../outside.md",
        ),
        ("create_task", {"title": "x", "path": "missing.md"}, "reading file missing.md"),
    ],
)
async def test_refusals_are_tool_errors(
    tmp_path: Path, name: str, args: dict[str, Any], message: str
) -> None:
    result = await call(tasks(tmp_path), name, **args)
    assert result.is_error and result.output.startswith(message), result.output


async def test_a_description_from_a_markdown_file_and_a_corrupt_file_as_empty(
    tmp_path: Path,
) -> None:
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "step.md").write_text("# Step\nDo it.")
    tools = tasks(tmp_path, path="plan/tasks.json")
    task = await create(tools, "From file", path="step.md")
    assert task["description"] == "# Step\nDo it."
    (tmp_path / "plan" / "tasks.json").write_text("{not json")
    assert (await call(tools, "list_tasks")).output == "null"


def test_the_file_must_stay_in_the_working_directory(tmp_path: Path) -> None:
    built = build_tools(
        [ToolsetConfig("tasks", {"path": "../escape.json"})], ToolContext(working_dir=tmp_path)
    )
    assert built.warnings == [
        "toolset tasks failed: invalid tasks storage path: path outside allowed directory: "
        "../escape.json"
    ]


def test_annotations_follow_upstream(tmp_path: Path) -> None:
    tools = tasks(tmp_path).tools
    reads = {n for n, t in tools.items() if t.annotations.read_only}
    assert reads == {"get_task", "list_tasks", "next_task"}
    assert tools["delete_task"].annotations.destructive is True
