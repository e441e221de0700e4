"""The filesystem toolset against real temporary directories.

Confinement is checked with hypothesis-generated relative paths (``..`` segments, absolute
paths, symlinks out of the root): a path resolves inside the root or is refused, never else.
File work runs in worker threads, so these tests use the real clock (no autojump).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from greenroom.agents import ToolContext, ToolsetConfig
from greenroom.agents.tools import build_tools
from greenroom.agents.tools._paths import Confinement, PathRefused
from tests.slowness import slow


def realpath(path: Path) -> Path:
    return Path(os.path.realpath(path))


def fs_tools(root: Path, **options: Any) -> dict[str, Any]:
    return build_tools([ToolsetConfig("filesystem", options)], ToolContext(working_dir=root)).tools


async def call(tools: dict[str, Any], name: str, **args: Any):
    return await tools[name].call(args)


async def test_write_read_edit_round_trip(tmp_path: Path) -> None:
    tools = fs_tools(tmp_path)
    written = await call(tools, "write_file", path="sub/a.txt", content="hello world\n")
    assert written.output == "File written successfully: sub/a.txt (12 bytes)"
    assert (tmp_path / "sub/a.txt").read_text() == "hello world\n"
    read = await call(tools, "read_file", path="sub/a.txt")
    assert (read.output, read.is_error) == ("hello world\n", False)
    edited = await call(
        tools, "edit_file", path="sub/a.txt", edits=[{"oldText": "world", "newText": "there"}]
    )
    assert edited.output == "File edited successfully. Replaced 5 characters"
    two = await call(
        tools,
        "edit_file",
        path="sub/a.txt",
        edits=[{"oldText": "hello", "newText": "hi"}, {"oldText": "there", "newText": "you"}],
    )
    assert two.output.splitlines()[1:] == [
        "Edit 1: Replaced 5 characters",
        "Edit 2: Replaced 5 characters",
    ]
    missing = await call(
        tools, "edit_file", path="sub/a.txt", edits=[{"oldText": "nope", "newText": "x"}]
    )
    assert (missing.output, missing.is_error) == ("Edit 1 failed: old text not found", True)
    assert (tmp_path / "sub/a.txt").read_text() == "hi you\n"
    assert (await call(tools, "read_file", path="gone.txt")).output == "not found"


async def test_listing_tree_and_directories(tmp_path: Path) -> None:
    tools = fs_tools(tmp_path)
    made = await call(tools, "create_directory", paths=["d1/inner", "d2"])
    assert made.output.splitlines() == [
        "Directory created successfully: d1/inner",
        "Directory created successfully: d2",
    ]
    (tmp_path / "f.txt").write_text("x")
    listing = await call(tools, "list_directory", path=".")
    assert listing.output.splitlines() == ["DIR  d1", "DIR  d2", "FILE f.txt"]
    tree = json.loads((await call(tools, "directory_tree", path="d1")).output)
    assert tree == {
        "name": "d1",
        "type": "directory",
        "children": [{"name": "inner", "type": "directory", "children": []}],
    }
    removed = await call(tools, "remove_directory", paths=["d2"])
    assert removed.output == "Directory removed successfully: d2"
    not_empty = await call(tools, "remove_directory", paths=["d1"])
    assert not_empty.is_error
    assert not_empty.output.startswith("Error removing directory d1:")


async def test_search_honours_gitignore_and_excludes(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("build/\n*.log\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build/out.txt").write_text("needle in build\n")
    (tmp_path / "app.log").write_text("needle in log\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/.gitignore").write_text("gen.py\n")
    (tmp_path / "src/gen.py").write_text("needle generated\n")
    (tmp_path / "src/main.py").write_text("first line\nx = 'needle'\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/n.md").write_text("needle in docs\n")
    tools = fs_tools(tmp_path)
    found = await call(tools, "search_files_content", path=".", query="needle")
    real = realpath(tmp_path)
    main, docs = real / "src/main.py", real / "docs/n.md"
    assert found.output.splitlines() == [f"{docs}:1:1: needle in docs", f"{main}:2:6: x = 'needle'"]
    assert found.meta == {"matchCount": 2, "fileCount": 2}
    excluded = await call(
        tools, "search_files_content", path=".", query="needle", excludePatterns=["docs/*"]
    )
    assert excluded.output.splitlines() == [f"{main}:2:6: x = 'needle'"]
    regex = await call(tools, "search_files_content", path="src", query=r"x = '\w+'", is_regex=True)
    assert regex.output == f"{main}:2:1: x = 'needle'"
    bad = await call(tools, "search_files_content", path=".", query="(", is_regex=True)
    assert bad.is_error
    assert bad.output.startswith("Invalid regex pattern:")
    listing = await call(tools, "list_directory", path=".")
    assert "DIR  build" not in listing.output.splitlines()
    assert (await call(tools, "search_files_content", path=".", query="zzz")).output == (
        "No results found"
    )
    unfiltered = fs_tools(tmp_path, ignore_vcs=False)
    all_hits = await call(unfiltered, "search_files_content", path=".", query="needle")
    assert len(all_hits.output.splitlines()) == 5


async def test_escapes_are_refused_naming_the_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    os.symlink(tmp_path, root / "dirlink")
    tools = fs_tools(root)
    real_root = str(realpath(root))
    for path in ("../secret.txt", str(tmp_path / "secret.txt"), "link.txt", "dirlink/secret.txt"):
        result = await call(tools, "read_file", path=path)
        assert result.is_error
        assert result.output == f"path {path!r} is outside the working directory {real_root!r}"
    write = await call(tools, "write_file", path="../evil.txt", content="x")
    assert write.is_error
    assert not (tmp_path / "evil.txt").exists()
    # A symlinked directory that leads out of the root is not walked by a search either.
    found = await call(tools, "search_files_content", path=".", query="secret")
    assert found.output == "No results found"


async def test_allow_and_deny_paths(tmp_path: Path) -> None:
    root, shared = tmp_path / "root", tmp_path / "shared"
    root.mkdir()
    shared.mkdir()
    (shared / "data.txt").write_text("shared data")
    (root / ".env").write_text("KEY=1")
    (root / "secrets").mkdir()
    (root / "secrets/k").write_text("k")
    tools = fs_tools(root, allow_paths=["../shared"], deny_paths=[".env", "secrets/"])
    assert (await call(tools, "read_file", path="../shared/data.txt")).output == "shared data"
    for path in (".env", "secrets/k"):
        refused = await call(tools, "read_file", path=path)
        assert refused.output == f"path {path!r} is denied by the toolset's deny_paths"
    assert (await call(tools, "list_directory", path=".")).output == ""
    unconfined = fs_tools(root, confine=False)
    assert (await call(unconfined, "read_file", path="../shared/data.txt")).output == "shared data"


SEGMENTS = st.sampled_from(["..", ".", "a", "b", "link", "out", "/", "/tmp", "~", "a/.."])


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=6))
def test_confinement_never_resolves_outside_the_root(tmp_path: Path, parts: list[str]) -> None:
    base = tmp_path / "h"
    root = base / "root"
    if not root.exists():
        (root / "a/b").mkdir(parents=True)
        (base / "out").mkdir()
        os.symlink(base / "out", root / "link")  # leads out
        os.symlink(root / "a", root / "a/b/up")  # stays in
    given_path = "/".join(parts)
    paths = Confinement(root)
    real_root = root.resolve()
    try:
        resolved = paths.resolve(given_path)
    except PathRefused as exc:
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        assert repr(given_path) in refusal
        return
    assert resolved == real_root or real_root in resolved.parents
    assert Path(os.path.realpath(resolved)) == resolved


async def test_read_multiple_files_inline_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A")
    tools = fs_tools(tmp_path)
    text = await call(tools, "read_multiple_files", paths=["a.txt", "b.txt", "../x"])
    assert text.output.startswith("=== a.txt ===\nA\n\n=== b.txt ===\nnot found\n\n=== ../x ===\n")
    assert not text.is_error
    as_json = json.loads(
        (await call(tools, "read_multiple_files", paths=["a.txt"], json=True)).output
    )
    assert as_json == [{"path": "a.txt", "content": "A"}]


async def test_image_files_are_attached(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    (tmp_path / "p.png").write_bytes(png)
    result = await call(fs_tools(tmp_path), "read_file", path="p.png")
    assert result.output == f"Read image file p.png [image/png] ({len(png)} bytes)"
    assert result.images[0].mime_type == "image/png"


async def test_post_edit_hook_runs_and_reports_failure(tmp_path: Path) -> None:
    hooks = [{"path": "*.txt", "cmd": 'echo "$path" > hook.out'}, {"path": "*.md", "cmd": "exit 3"}]
    tools = fs_tools(tmp_path, post_edit=hooks)
    ok = await call(tools, "write_file", path="a.txt", content="x")
    assert not ok.is_error
    assert (tmp_path / "hook.out").read_text().strip() == str((tmp_path / "a.txt").resolve())
    failed = await call(tools, "write_file", path="b.md", content="x")
    assert failed.is_error
    assert failed.output.startswith("File written successfully but post-edit command failed:")
    with trio.fail_after(slow(5)):  # real clock: the hook is a real process
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("name", ["read_file", "write_file", "edit_file", "list_directory"])
def test_annotations_follow_upstream(tmp_path: Path, name: str) -> None:
    tool = fs_tools(tmp_path)[name]
    assert tool.annotations.read_only is (name in ("read_file", "list_directory"))
    assert tool.category == "filesystem"
