"""``todo``: an in-memory todo list per toolset (``shared: true``: one list for the process)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import (
    FunctionTool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolsetError,
    schema,
    string,
    strings,
)
from ._registry import Toolset, register

INSTRUCTIONS = (
    "## Todo list\n\n"
    "Track multi-step work with the todo tools: create the todos first, mark each "
    "in-progress when you start it and completed when it is done, and finish every todo "
    "before you end your turn."
)


@attrs.define
class TodoStore:
    todos: list[dict[str, str]] = attrs.field(factory=list)
    counter: int = 0

    def add(self, description: str) -> dict[str, str]:
        self.counter += 1
        todo = {"id": f"todo_{self.counter}", "description": description, "status": "pending"}
        self.todos.append(todo)
        return dict(todo)

    def reminder(self) -> str:
        parts = [
            f" ({status}) [{t['id']}] {t['description']}"
            for status in ("in-progress", "pending")
            for t in self.todos
            if t["status"] == status
        ]
        if not parts:
            return ""
        return "The following todos are still incomplete and MUST be completed:" + "".join(parts)

    def snapshot(self) -> list[dict[str, str]]:
        return [dict(t) for t in self.todos]


SHARED = TodoStore()


def _result(store: TodoStore, body: dict[str, Any], *, is_error: bool = False) -> ToolResult:
    reminder = store.reminder()
    if reminder:
        body["reminder"] = reminder
    return ToolResult(json.dumps(body), is_error=is_error, meta=store.snapshot())


@register("todo")
def todo_toolset(config: ToolsetConfig, _: ToolContext) -> Toolset:
    shared = config.options.get("shared", False)
    if not isinstance(shared, bool):
        raise ToolsetError("shared must be a boolean")
    store = SHARED if shared else TodoStore()

    async def create_todo(args: Mapping[str, Any]) -> ToolResult:
        created = store.add(str(args["description"]))
        return _result(store, {"created": created, "all_todos": store.snapshot()})

    async def create_todos(args: Mapping[str, Any]) -> ToolResult:
        created = [store.add(str(d)) for d in args["descriptions"]]
        return _result(store, {"created": created, "all_todos": store.snapshot()})

    async def update_todos(args: Mapping[str, Any]) -> ToolResult:
        by_id = {t["id"]: t for t in store.todos}
        updated, not_found = [], []
        for update in args["updates"]:
            todo = by_id.get(str(update["id"]))
            if todo is None:
                not_found.append(str(update["id"]))
                continue
            todo["status"] = str(update["status"])
            updated.append({"id": todo["id"], "status": todo["status"]})
        if not updated and not_found:
            return ToolResult(
                json.dumps({"not_found": not_found, "all_todos": None}), is_error=True
            )
        body: dict[str, Any] = {}
        if updated:
            body["updated"] = updated
        if not_found:
            body["not_found"] = not_found
        body["all_todos"] = store.snapshot()
        return _result(store, body)

    async def list_todos(_: Mapping[str, Any]) -> ToolResult:
        return _result(store, {"todos": store.snapshot()})

    update_item = schema(
        {"id": string("The todo's ID"), "status": string("pending, in-progress or completed")},
        ("id", "status"),
    )
    specs = [
        (
            ToolSpec(
                "create_todo",
                "Create a new todo item.",
                schema({"description": string("What to do")}, ("description",)),
            ),
            create_todo,
            "Create Todo",
        ),
        (
            ToolSpec(
                "create_todos",
                "Create several todo items at once.",
                schema({"descriptions": strings("What to do, one per todo")}, ("descriptions",)),
            ),
            create_todos,
            "Create Todos",
        ),
        (
            ToolSpec(
                "update_todos",
                "Update the status of one or more todos.",
                schema(
                    {
                        "updates": {
                            "type": "array",
                            "description": "Status changes",
                            "items": update_item,
                        }
                    },
                    ("updates",),
                ),
            ),
            update_todos,
            "Update Todos",
        ),
        (
            ToolSpec("list_todos", "List all todos and their status.", schema({})),
            list_todos,
            "List Todos",
        ),
    ]
    tools = [
        FunctionTool(spec, fn, ToolAnnotations(title=title, read_only=True), "todo")
        for spec, fn, title in specs
    ]
    return Toolset(list(tools), INSTRUCTIONS)
