"""``filesystem``: read, search, write and edit files inside the working directory (spec §2.6).

Every path goes through :class:`~._paths.Confinement` first; a refused path is a tool error
naming it. Tool names, parameters and result texts follow docker-agent; the bodies are
synchronous functions run in a worker thread, so a large search never stalls the event loop.

Options: ``ignore_vcs`` (default true), ``post_edit`` (``[{path: glob, cmd}]``), and
greenroom's ``allow_paths`` (further roots), ``deny_paths`` (gitignore patterns) and
``confine`` (default true; false restores upstream's unconfined behaviour).
"""

from __future__ import annotations

import base64
import fnmatch
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import (
    FunctionTool,
    Image,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolsetError,
    error,
    schema,
    string,
    strings,
)
from ._paths import Confinement, PathRefused, VcsFilter
from ._registry import Toolset, register

TREE_LIMIT = 100
LIST_LIMIT = 100
PREVIEW_LONG_LINE = 100
PREVIEW_CONTEXT = 20
IMAGE_LIMIT = 4_500_000
IMAGE_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png",
               ".gif": "image/gif", ".webp": "image/webp"}  # fmt: skip

INSTRUCTIONS = (
    "## Filesystem tools\n\n"
    "Paths are relative to the working directory {root}; absolute paths work too. Access is "
    "limited to the working directory (and any allowed roots): a path that leaves it, through "
    "'..', an absolute path or a symlink, is refused. Prefer search_files_content and "
    "directory_tree to find things, read a file before you edit it, and use edit_file for "
    "small changes instead of rewriting whole files."
)


def _os_error(exc: OSError) -> str:
    return f"{exc.strerror or exc}" if exc.filename is None else f"{exc.filename}: {exc.strerror}"


class Filesystem:
    """The state of one filesystem toolset: its confinement, VCS filter and post-edit hooks."""

    def __init__(self, config: ToolsetConfig, ctx: ToolContext) -> None:
        options = config.options
        ignore_vcs = options.get("ignore_vcs", True)
        if not isinstance(ignore_vcs, bool):
            raise ToolsetError("ignore_vcs must be a boolean")
        allow, deny = options.get("allow_paths", ()), options.get("deny_paths", ())
        for key, value in (("allow_paths", allow), ("deny_paths", deny)):
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ToolsetError(f"{key} must be a list of strings")
        confine = options.get("confine", True)
        if not isinstance(confine, bool):
            raise ToolsetError("confine must be a boolean")
        hooks = options.get("post_edit", ())
        self.post_edit: list[tuple[str, str]] = []
        for hook in hooks if isinstance(hooks, list | tuple) else ():
            if isinstance(hook, Mapping) and isinstance(hook.get("path"), str):
                self.post_edit.append((str(hook["path"]), str(hook.get("cmd", ""))))
        self.paths = Confinement(ctx.working_dir, allow=allow, deny=deny, confined=confine)
        self.vcs = VcsFilter(self.paths.root, enabled=ignore_vcs)
        self.env = dict(ctx.env)

    # --- read-only tools ---------------------------------------------------------------------

    def directory_tree(self, args: Mapping[str, Any]) -> ToolResult:
        root = self.paths.resolve(str(args["path"]))
        counts = {"nodes": 0, "files": 0, "dirs": 0}
        truncated = False

        def node(path: Path) -> dict[str, Any] | None:
            nonlocal truncated
            if counts["nodes"] >= TREE_LIMIT:
                truncated = True
                return None
            counts["nodes"] += 1
            if not path.is_dir():
                counts["files"] += 1
                return {"name": path.name, "type": "file"}
            counts["dirs"] += 1
            children: list[dict[str, Any]] = []
            try:
                entries = sorted(path.iterdir(), key=lambda p: p.name)
            except OSError:
                entries = []
            for entry in entries:
                if self.vcs.ignored(entry) or self.paths.denied(entry):
                    continue
                child = node(entry)
                if child is None:
                    break
                children.append(child)
            return {"name": path.name, "type": "directory", "children": children}

        if not root.exists():
            return error(
                f"Error building directory tree: {args['path']}: no such file or directory"
            )
        tree = node(root)
        meta = {"fileCount": counts["files"], "dirCount": counts["dirs"], "truncated": truncated}
        return ToolResult(json.dumps(tree, indent=2), meta=meta)

    def list_directory(self, args: Mapping[str, Any]) -> ToolResult:
        path = self.paths.resolve(str(args["path"]))
        try:
            entries = sorted(path.iterdir(), key=lambda p: p.name)
        except OSError as exc:
            return error(f"Error reading directory: {_os_error(exc)}")
        lines: list[str] = []
        files = dirs = 0
        truncated = False
        for entry in entries:
            if self.vcs.ignored(entry) or self.paths.denied(entry):
                continue
            if len(lines) >= LIST_LIMIT:
                truncated = True
                lines.append("...output truncated due to file limit...")
                break
            if entry.is_dir():
                dirs += 1
                lines.append(f"DIR  {entry.name}")
            else:
                files += 1
                lines.append(f"FILE {entry.name}")
        return ToolResult(
            "\n".join(lines), meta={"files": files, "dirs": dirs, "truncated": truncated}
        )

    def read_file(self, args: Mapping[str, Any]) -> ToolResult:
        given = str(args["path"])
        path = self.paths.resolve(given)
        if not path.exists():
            return error("not found", meta={"path": given, "error": "not found", "lineCount": 0})
        mime = IMAGE_TYPES.get(path.suffix.lower())
        try:
            if mime is not None and path.is_file():
                data = path.read_bytes()
                if len(data) > IMAGE_LIMIT:
                    return error(
                        f"Error: Image file too large ({len(data)} bytes, max {IMAGE_LIMIT} bytes)"
                    )
                image = Image(base64.b64encode(data).decode(), mime)
                text = f"Read image file {given} [{mime}] ({len(data)} bytes)"
                return ToolResult(text, images=(image,))
            if path.is_dir():
                return error(f"read {given}: is a directory")
            content = path.read_text(errors="replace")
        except OSError as exc:
            return error(_os_error(exc))
        meta = {"path": given, "content": content, "lineCount": content.count("\n") + 1}
        return ToolResult(content, meta=meta)

    def read_multiple_files(self, args: Mapping[str, Any]) -> ToolResult:
        entries: list[dict[str, str]] = []
        for given in args["paths"]:
            try:
                path = self.paths.resolve(str(given))
                content = path.read_text(errors="replace") if path.exists() else "not found"
            except PathRefused as exc:
                content = str(exc)
            except OSError as exc:
                content = _os_error(exc)
            entries.append({"path": str(given), "content": content})
        if args.get("json"):
            return ToolResult(json.dumps(entries))
        return ToolResult("".join(f"=== {e['path']} ===\n{e['content']}\n\n" for e in entries))

    def search_files_content(self, args: Mapping[str, Any]) -> ToolResult:
        root = self.paths.resolve(str(args["path"]))
        query = str(args["query"])
        excludes = [str(p) for p in args.get("excludePatterns") or ()]
        if args.get("is_regex"):
            try:
                pattern = re.compile(query)
            except re.error as exc:
                return error(f"Invalid regex pattern: {exc}")
            find = _regex_finder(pattern)
        else:
            find = _text_finder(query)
        hits: list[str] = []
        files = 0
        for path in self._walk(root, excludes):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            matched = False
            for number, line in enumerate(text.split("\n"), 1):
                column = find(line)
                if column < 0:
                    continue
                matched = True
                byte_column = len(line[:column].encode()) + 1
                hits.append(f"{path}:{number}:{byte_column}: {_preview(line, column, query)}")
            files += matched
        meta = {"matchCount": len(hits), "fileCount": files}
        return ToolResult("\n".join(hits) if hits else "No results found", meta=meta)

    def _walk(self, root: Path, excludes: list[str]) -> list[Path]:
        if root.is_file():
            return [root]
        found: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = sorted(d for d in dirnames if self._keep(here / d, root, excludes))
            for name in sorted(filenames):
                path = here / name
                if self._keep(path, root, excludes):
                    found.append(path)
        return found

    def _keep(self, path: Path, root: Path, excludes: list[str]) -> bool:
        if self.vcs.ignored(path) or self.paths.denied(path):
            return False
        if path.is_symlink() and self.paths.confined:
            real = Path(os.path.realpath(path))
            if not any(_inside(real, r) for r in self.paths.roots):
                return False  # a symlink leading out of the allowed roots
        relative = path.relative_to(root).as_posix()
        return not any(_excluded(relative, pattern) for pattern in excludes)

    # --- writing tools -----------------------------------------------------------------------

    def write_file(self, args: Mapping[str, Any]) -> ToolResult:
        given, content = str(args["path"]), str(args["content"])
        path = self.paths.resolve(given)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        except OSError as exc:
            return error(f"Error creating directory structure: {_os_error(exc)}")
        try:
            path.write_text(content)
        except OSError as exc:
            return error(f"Error writing file: {_os_error(exc)}")
        return ToolResult(f"File written successfully: {given} ({len(content)} bytes)")

    def edit_file(self, args: Mapping[str, Any]) -> ToolResult:
        path = self.paths.resolve(str(args["path"]))
        try:
            text = path.read_text()
        except OSError as exc:
            return error(f"Error reading file: {_os_error(exc)}")
        replaced: list[int] = []
        for index, edit in enumerate(args["edits"], 1):
            old, new = str(edit["oldText"]), str(edit["newText"])
            if old not in text:
                return error(f"Edit {index} failed: old text not found")
            text = text.replace(old, new, 1)
            replaced.append(len(old))
        try:
            path.write_text(text)
        except OSError as exc:
            return error(f"Error writing file: {_os_error(exc)}")
        if len(replaced) == 1:
            return ToolResult(f"File edited successfully. Replaced {replaced[0]} characters")
        lines = [f"Edit {i}: Replaced {n} characters" for i, n in enumerate(replaced, 1)]
        return ToolResult("File edited successfully. Changes:\n" + "\n".join(lines))

    def create_directory(self, args: Mapping[str, Any]) -> ToolResult:
        done: list[str] = []
        for given in args["paths"]:
            try:
                self.paths.resolve(str(given)).mkdir(parents=True, exist_ok=True, mode=0o755)
            except OSError as exc:
                return error(f"Error creating directory {given}: {_os_error(exc)}")
            done.append(f"Directory created successfully: {given}")
        return ToolResult("\n".join(done))

    def remove_directory(self, args: Mapping[str, Any]) -> ToolResult:
        done: list[str] = []
        for given in args["paths"]:
            path = self.paths.resolve(str(given))
            if path in self.paths.roots:
                return error(f"Error removing directory {given}: it is a root of the toolset")
            try:
                path.rmdir()
            except OSError as exc:
                return error(f"Error removing directory {given}: {_os_error(exc)}")
            done.append(f"Directory removed successfully: {given}")
        return ToolResult("\n".join(done))

    async def run_post_edit(self, path: Path, done: ToolResult, verb: str) -> ToolResult:
        for pattern, cmd in self.post_edit:
            if not fnmatch.fnmatchcase(path.name, pattern):
                continue
            env = {**self.env, "path": str(path)}
            proc = await trio.run_process(
                ["/bin/sh", "-c", cmd], env=env, check=False, capture_stdout=True,
                capture_stderr=True, cwd=str(self.paths.root),
            )  # fmt: skip
            if proc.returncode != 0:
                return error(
                    f"File {verb} successfully but post-edit command failed: post-edit command "
                    f"failed for {path}: exit status {proc.returncode}"
                )
        return done


def _regex_finder(pattern: re.Pattern[str]) -> Callable[[str], int]:
    def find(line: str) -> int:
        found = pattern.search(line)
        return found.start() if found else -1

    return find


def _text_finder(query: str) -> Callable[[str], int]:
    def find(line: str) -> int:
        return line.find(query)

    return find


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _excluded(relative: str, pattern: str) -> bool:
    if pattern.endswith("/*") and (relative == pattern[:-2] or relative.startswith(pattern[:-1])):
        return True
    parts = relative.split("/")
    candidates = [relative, parts[-1]] + ["/".join(parts[:i]) for i in range(1, len(parts))]
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def _preview(line: str, column: int, query: str) -> str:
    raw = line.encode()
    if len(raw) <= PREVIEW_LONG_LINE:
        return line
    start = len(line[:column].encode())
    end = start + len(query.encode())
    cut = raw[max(0, start - PREVIEW_CONTEXT) : end + PREVIEW_CONTEXT]
    return cut.decode(errors="ignore")


# --- specs -----------------------------------------------------------------------------------

_PATH = string("The path, relative to the working directory or absolute")
_EDITS = {
    "type": "array",
    "description": "Edits applied in order; each replaces the first occurrence of oldText",
    "items": schema(
        {"oldText": string("Text to search for; must match exactly"),
         "newText": string("Text to replace it with")},
        ("oldText", "newText"),
    ),
}  # fmt: skip

SPECS: dict[str, tuple[str, dict[str, Any], ToolAnnotations]] = {
    "directory_tree": (
        "Get a recursive tree view of files and directories as a JSON structure.",
        schema({"path": _PATH}, ("path",)),
        ToolAnnotations(title="Directory Tree", read_only=True),
    ),
    "edit_file": (
        "Make line-based edits to a text file. Each edit replaces exact text sequences.",
        schema({"path": _PATH, "edits": _EDITS}, ("path", "edits")),
        ToolAnnotations(title="Edit"),
    ),
    "list_directory": (
        "Get a detailed listing of all files and directories in a specified path.",
        schema({"path": _PATH}, ("path",)),
        ToolAnnotations(title="List Directory", read_only=True),
    ),
    "read_file": (
        "Read the complete contents of a file from the file system.",
        schema({"path": _PATH}, ("path",)),
        ToolAnnotations(title="Read", read_only=True),
    ),
    "read_multiple_files": (
        "Read the contents of multiple files simultaneously.",
        schema(
            {
                "paths": strings("Paths of the files to read"),
                "json": {"type": "boolean", "description": "Return the result as a JSON array"},
            },
            ("paths",),
        ),
        ToolAnnotations(title="Read Multiple Files", read_only=True),
    ),
    "search_files_content": (
        "Search for text or regex patterns in the content of files, recursively.",
        schema(
            {
                "path": string("The directory (or file) to search"),
                "query": string("The text or regex to look for"),
                "is_regex": {"type": "boolean", "description": "Treat query as a regex"},
                "excludePatterns": strings("Glob patterns of paths to leave out"),
            },
            ("path", "query"),
        ),
        ToolAnnotations(title="Search Files Content", read_only=True),
    ),
    "write_file": (
        "Create a new file or completely overwrite an existing file with new content.",
        schema({"path": _PATH, "content": string("The content to write")}, ("path", "content")),
        ToolAnnotations(title="Write"),
    ),
    "create_directory": (
        "Create one or more directories, with their parents.",
        schema({"paths": strings("Directories to create")}, ("paths",)),
        ToolAnnotations(title="Create Directory"),
    ),
    "remove_directory": (
        "Remove one or more empty directories.",
        schema({"paths": strings("Empty directories to remove")}, ("paths",)),
        ToolAnnotations(title="Remove Directory", destructive=True),
    ),
}


@register("filesystem")
def filesystem_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    fs = Filesystem(config, ctx)
    tools: list[Tool] = []
    for name, (description, parameters, hints) in SPECS.items():
        body: Callable[[Mapping[str, Any]], ToolResult] = getattr(fs, name)
        verb = {"write_file": "written", "edit_file": "edited"}.get(name, "")
        tools.append(
            FunctionTool(
                ToolSpec(name, description, parameters),
                _runner(fs, body, verb, writes=not hints.read_only),
                hints,
                "filesystem",
            )
        )
    return Toolset(tools, INSTRUCTIONS.format(root=fs.paths.root))


def _runner(
    fs: Filesystem, body: Callable[[Mapping[str, Any]], ToolResult], verb: str, *, writes: bool
) -> Callable[[Mapping[str, Any]], Any]:
    async def run(args: Mapping[str, Any]) -> ToolResult:
        try:
            # Reads may be abandoned when the turn is cancelled; writes finish what they began.
            result = await trio.to_thread.run_sync(body, args, abandon_on_cancel=not writes)
        except PathRefused as exc:
            return error(str(exc))
        if verb and not result.is_error and fs.post_edit:
            return await fs.run_post_edit(fs.paths.resolve(str(args["path"])), result, verb)
        return result

    return run
