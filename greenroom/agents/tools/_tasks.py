"""``tasks``: a persistent task list with priorities and dependencies, kept in a JSON file
(spec §2.12).

The file (``path``, default ``tasks.json``) is resolved against the session's working directory
and must stay inside it (an absolute path is taken as it is). It holds ``{"tasks": {id: task}}``,
pretty-printed, and is rewritten (atomically, mode 0600) after each change; a file that cannot
be read or parsed counts as an empty list. A task's *effective* status is ``done`` when done,
``blocked`` while a dependency that still exists is not done, else its own status. Lists are
sorted: actionable before blocked, then by priority, then by creation time.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import (
    FunctionTool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolsetError,
    error,
    schema,
    string,
    strings,
)
from ._registry import Toolset, register

PRIORITIES = ("critical", "high", "medium", "low")
STATUSES = ("pending", "in_progress", "done", "blocked")
NOTHING_TO_DO = "No actionable tasks. Everything is either done or blocked."
INSTRUCTIONS = (
    "## Task Tools\n\n"
    "A persistent task list, kept between sessions: priorities (critical > high > medium > "
    "low), statuses (pending, in_progress, done, blocked) and dependencies. A task is blocked "
    "while any task it depends on is not done. Use next_task to find the most important task "
    "you can work on now."
)
_LOCKS: dict[Path, trio.Lock] = {}  # one writer at a time per file, across the toolsets


class TaskError(Exception):
    """A request the task list refuses (the message is the tool error)."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def effective(task: Mapping[str, Any], tasks: Mapping[str, Mapping[str, Any]]) -> str:
    if task["status"] == "done":
        return "done"
    for dep in task.get("dependencies") or ():
        if dep in tasks and tasks[dep]["status"] != "done":
            return "blocked"
    return str(task["status"])


def creates_cycle(tasks: Mapping[str, Mapping[str, Any]], start: str, deps: list[str]) -> bool:
    """Whether ``start`` depending on ``deps`` makes ``start`` reachable from itself."""
    pending, seen = list(deps), set()
    while pending:
        current = pending.pop()
        if current == start:
            return True
        if current in seen:
            continue
        seen.add(current)
        pending.extend(tasks.get(current, {}).get("dependencies") or ())
    return False


def with_effective(
    task: Mapping[str, Any], tasks: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    return {**task, "effectiveStatus": effective(task, tasks)}


def sorted_tasks(tasks: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    listed = [with_effective(task, tasks) for task in tasks.values()]
    listed.sort(
        key=lambda t: (
            t["effectiveStatus"] == "blocked",
            PRIORITIES.index(t["priority"]) if t["priority"] in PRIORITIES else len(PRIORITIES),
            t["createdAt"],
        )
    )
    return listed


def tasks_path(config: ToolsetConfig, ctx: ToolContext) -> Path:
    given = config.options.get("path", "tasks.json")
    if not isinstance(given, str) or not given:
        raise ToolsetError("path must be a non-empty string")
    path = Path(given)
    if path.is_absolute():
        return path
    base = Path(os.path.realpath(ctx.working_dir))
    resolved = Path(os.path.realpath(base / path))
    if resolved != base and base not in resolved.parents:
        raise ToolsetError(f"invalid tasks storage path: path outside allowed directory: {given}")
    return resolved


class TaskFile:
    """The task list in one file; each change is one load-change-save under the file's lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = _LOCKS.setdefault(path, trio.Lock())

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        tasks = data.get("tasks") if isinstance(data, dict) else None
        return dict(tasks) if isinstance(tasks, dict) else {}

    def _save(self, tasks: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"tasks": tasks}, f, indent=2)
        os.replace(temporary, self.path)

    async def read(self) -> dict[str, dict[str, Any]]:
        async with self._lock:
            return await trio.to_thread.run_sync(self._load)

    async def change(self, fn: Callable[[dict[str, dict[str, Any]]], Any]) -> Any:
        """Run ``fn`` on the loaded tasks and save them; ``fn`` raises TaskError to refuse."""

        def work() -> Any:
            tasks = self._load()
            result = fn(tasks)
            self._save(tasks)
            return result

        async with self._lock:
            return await trio.to_thread.run_sync(work)

    def description(self, text: str, path: str) -> str:
        """``text``, or the content of the file ``path`` inside the tasks file's directory."""
        if not path:
            return text
        base = Path(os.path.realpath(self.path.parent))
        target = Path(os.path.realpath(base / path))
        if target != base and base not in target.parents:
            raise TaskError(f"invalid file path: {path} is outside {base}")
        try:
            return target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskError(f"reading file {path}: {exc}") from None


def _priority(value: Any, default: str = "medium") -> str:
    if value in (None, ""):
        return default
    if value not in PRIORITIES:
        raise TaskError(f"invalid priority: {value}")
    return str(value)


def _check_deps(tasks: Mapping[str, Any], task_id: str, deps: list[str]) -> None:
    for dep in deps:
        if dep not in tasks:
            raise TaskError(f"dependency task not found: {dep}")
    if creates_cycle(tasks, task_id, deps):
        raise TaskError("adding these dependencies would create a cycle")


def _task(tasks: Mapping[str, dict[str, Any]], task_id: str) -> dict[str, Any]:
    task = tasks.get(task_id)
    if task is None:
        raise TaskError(f"task not found: {task_id}")
    return task


def refusing(
    fn: Callable[[Mapping[str, Any]], Awaitable[ToolResult]],
) -> Callable[[Mapping[str, Any]], Awaitable[ToolResult]]:
    """The handler ``fn`` with a refused request (TaskError) as a tool error."""

    async def call(args: Mapping[str, Any]) -> ToolResult:
        try:
            return await fn(args)
        except TaskError as exc:
            return error(str(exc))

    return call


def _json(value: Any) -> ToolResult:
    return ToolResult(json.dumps(value))


@register("tasks")
def tasks_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    store = TaskFile(tasks_path(config, ctx))

    @refusing
    async def create_task(args: Mapping[str, Any]) -> ToolResult:
        description = await trio.to_thread.run_sync(
            store.description, str(args.get("description", "")), str(args.get("path", ""))
        )
        priority = _priority(args.get("priority"))
        deps = [str(d) for d in args.get("dependencies") or []]
        task_id = str(uuid.uuid4())

        def add(tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
            _check_deps(tasks, task_id, deps)
            stamp = _now()
            tasks[task_id] = {
                "id": task_id,
                "title": str(args["title"]),
                "description": description,
                "priority": priority,
                "status": "pending",
                "dependencies": deps,
                "createdAt": stamp,
                "updatedAt": stamp,
            }
            return tasks[task_id]

        return _json(await store.change(add))

    @refusing
    async def get_task(args: Mapping[str, Any]) -> ToolResult:
        tasks = await store.read()
        return _json(with_effective(_task(tasks, str(args["id"])), tasks))

    @refusing
    async def update_task(args: Mapping[str, Any]) -> ToolResult:
        task_id = str(args["id"])
        description: str | None = None
        if args.get("description") or args.get("path"):
            description = await trio.to_thread.run_sync(
                store.description, str(args.get("description", "")), str(args.get("path", ""))
            )
        status = args.get("status")
        if status not in (None, "") and status not in STATUSES:
            raise TaskError(f"invalid status: {status}")
        priority = _priority(args.get("priority"), default="")

        def update(tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
            task = _task(tasks, task_id)
            if args.get("title"):
                task["title"] = str(args["title"])
            if description is not None:
                task["description"] = description
            if priority:
                task["priority"] = priority
            if status:
                task["status"] = status
            if args.get("dependencies") is not None:
                deps = [str(d) for d in args["dependencies"]]
                _check_deps(tasks, task_id, deps)
                task["dependencies"] = deps
            task["updatedAt"] = _now()
            return task

        return _json(await store.change(update))

    @refusing
    async def delete_task(args: Mapping[str, Any]) -> ToolResult:
        task_id = str(args["id"])

        def delete(tasks: dict[str, dict[str, Any]]) -> None:
            _task(tasks, task_id)
            del tasks[task_id]
            for task in tasks.values():
                task["dependencies"] = [d for d in task.get("dependencies") or [] if d != task_id]

        await store.change(delete)
        return _json({"deleted": task_id})

    async def list_tasks(args: Mapping[str, Any]) -> ToolResult:
        tasks = await store.read()
        listed = sorted_tasks(tasks)
        if args.get("status"):
            listed = [t for t in listed if t["effectiveStatus"] == args["status"]]
        if args.get("priority"):
            listed = [t for t in listed if t["priority"] == args["priority"]]
        return _json(listed or None)

    async def next_task(_: Mapping[str, Any]) -> ToolResult:
        for task in sorted_tasks(await store.read()):
            if task["effectiveStatus"] not in ("blocked", "done"):
                return _json(task)
        return ToolResult(NOTHING_TO_DO)

    @refusing
    async def add_dependency(args: Mapping[str, Any]) -> ToolResult:
        task_id, dep = str(args["taskId"]), str(args["dependsOnId"])

        def add(tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
            task = _task(tasks, task_id)
            if dep not in tasks:
                raise TaskError(f"dependency task not found: {dep}")
            deps = list(task.get("dependencies") or [])
            if dep in deps:
                raise TaskError("dependency already exists")
            if creates_cycle(tasks, task_id, [*deps, dep]):
                raise TaskError("adding this dependency would create a cycle")
            task["dependencies"] = [*deps, dep]
            task["updatedAt"] = _now()
            return task

        return _json(await store.change(add))

    @refusing
    async def remove_dependency(args: Mapping[str, Any]) -> ToolResult:
        task_id, dep = str(args["taskId"]), str(args["dependsOnId"])

        def remove(tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
            task = _task(tasks, task_id)
            task["dependencies"] = [d for d in task.get("dependencies") or [] if d != dep]
            task["updatedAt"] = _now()
            return task

        return _json(await store.change(remove))

    fields = {
        "title": string("Short title for the task"),
        "description": string("Task description (ignored if path is given)"),
        "path": string("A markdown file (beside the task file) whose content is the description"),
        "priority": string("Priority: critical, high, medium (default) or low"),
        "dependencies": strings("IDs of tasks that must be done before this one"),
    }
    task_id = {"id": string("The task's ID")}
    link = {
        "taskId": string("The task that depends on another"),
        "dependsOnId": string("The task that must be done first"),
    }
    update_fields = {
        **task_id,
        **fields,
        "status": string("New status: pending, in_progress, done or blocked"),
        "dependencies": strings("Replace the dependencies with these task IDs"),
    }
    read, ask, destroy = (
        ToolAnnotations(read_only=True),
        ToolAnnotations(),
        ToolAnnotations(destructive=True),
    )
    table: list[tuple[str, str, dict[str, Any], Any, ToolAnnotations, str]] = [
        ("create_task", "Create a new task with a title and either a description or a path "
         "to a markdown file whose content becomes the description; optionally a priority "
         "and the IDs of tasks it depends on.", schema(fields, ("title",)), create_task, ask,
         "Create Task"),
        ("get_task", "Get a task by ID with its effective status (blocked while a dependency "
         "is not done).", schema(task_id, ("id",)), get_task, read, "Get Task"),
        ("update_task", "Change a task's title, description (or path), priority, status or "
         "dependencies.", schema(update_fields, ("id",)), update_task, ask, "Update Task"),
        ("delete_task", "Delete a task; it is also removed from other tasks' dependencies.",
         schema(task_id, ("id",)), delete_task, destroy, "Delete Task"),
        ("list_tasks", "List the tasks, most important first and blocked ones last; "
         "optionally only those with an effective status or a priority.",
         schema({"status": string("Effective status to keep"), "priority": string("Priority "
                 "to keep")}), list_tasks, read, "List Tasks"),
        ("next_task", "The most important task that is neither blocked nor done.", schema({}),
         next_task, read, "Next Task"),
        ("add_dependency", "Make taskId wait until dependsOnId is done.",
         schema(link, ("taskId", "dependsOnId")), add_dependency, ask, "Add Dependency"),
        ("remove_dependency", "Remove a dependency from a task.",
         schema(link, ("taskId", "dependsOnId")), remove_dependency, ask, "Remove Dependency"),
    ]  # fmt: skip
    tools = [
        FunctionTool(ToolSpec(name, text, params), fn, attrs_with_title(hint, title), "tasks")
        for name, text, params, fn, hint, title in table
    ]
    return Toolset(list(tools), INSTRUCTIONS)


def attrs_with_title(annotations: ToolAnnotations, title: str) -> ToolAnnotations:
    return ToolAnnotations(
        title=title, read_only=annotations.read_only, destructive=annotations.destructive
    )
