"""Where the filesystem tools may go: inside the working directory, plus allowed roots.

A path the model gives is joined to the working directory (absolute paths stay as they are),
then every symlink in it is resolved. The result must be the working directory, an
``allow_paths`` root, or inside one of them (compared by components, never by string prefix),
and must not match a ``deny_paths`` pattern (gitignore syntax, relative to the working
directory, matched by ``pathspec``). Otherwise the call is refused with an error naming the
path the model gave. Checking the resolved path closes ``..`` and symlink escapes; a symlink
swapped in between the check and the use (a race with another process) is out of scope.

``.gitignore``-aware walking (``ignore_vcs``) is here as well: the rules of the git
repository holding the root, read once per toolset with ``pathspec``'s gitignore semantics.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pathspec


class PathRefused(Exception):
    """A path outside the allowed roots or on the deny list (the message names it)."""


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class Confinement:
    """The roots a filesystem toolset may touch.

    Args:
        root: the working directory; relative paths are joined to it.
        allow: further roots (absolute, or relative to ``root``).
        deny: gitignore-style patterns (relative to ``root``) that may not be touched.
        confined: False turns the root check off (``deny`` still applies).
    """

    def __init__(
        self,
        root: Path,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        confined: bool = True,
    ) -> None:
        self.root = _real(root)
        self.roots = [self.root] + [_real(self.root / a) for a in allow]
        self.confined = confined
        self._deny = pathspec.GitIgnoreSpec.from_lines(list(deny))

    def resolve(self, given: str) -> Path:
        """The real path ``given`` names. Raises PathRefused."""
        if "\x00" in given:
            raise PathRefused(f"path {given!r} contains a NUL byte")
        path = _real(self.root / Path(given).expanduser())
        if self.confined and not any(_within(path, root) for root in self.roots):
            raise PathRefused(f"path {given!r} is outside the working directory {str(self.root)!r}")
        if self.denied(path):
            raise PathRefused(f"path {given!r} is denied by the toolset's deny_paths")
        return path

    def denied(self, path: Path) -> bool:
        if not _within(path, self.root) or path == self.root:
            return False
        relative = path.relative_to(self.root).as_posix()
        return self._deny.match_file(relative) or (
            path.is_dir() and self._deny.match_file(relative + "/")
        )


class VcsFilter:
    """Skips ``.git`` directories and what the enclosing repository's ``.gitignore`` ignores.

    The rules are read on first use (a toolset that never searches never walks the tree).
    """

    def __init__(self, root: Path, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._root = root
        self._loaded = False
        self.repo: Path | None = None
        self._spec: pathspec.GitIgnoreSpec | None = None

    def _load(self) -> None:
        self._loaded = True
        self.repo = _find_repo(self._root)
        if self.repo is not None:
            self._spec = _gitignore(self.repo)

    def ignored(self, path: Path) -> bool:
        if not self.enabled:
            return False
        if ".git" in path.parts:
            return True
        if not self._loaded:
            self._load()
        repo, spec = self.repo, self._spec
        if repo is None or spec is None or path == repo or not _within(path, repo):
            return False
        return _matches(spec, path.relative_to(repo).as_posix(), path.is_dir())


def _matches(spec: pathspec.GitIgnoreSpec, relative: str, is_dir: bool) -> bool:
    return bool(spec.match_file(relative + "/" if is_dir else relative))


def _find_repo(start: Path) -> Path | None:
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _gitignore(repo: Path) -> pathspec.GitIgnoreSpec:
    """Every ``.gitignore`` of the repository, each pattern anchored to its own directory;
    directories already ignored are not entered (as git does)."""
    lines: list[str] = []
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    for dirpath, dirnames, filenames in os.walk(repo):
        base = Path(dirpath).relative_to(repo).as_posix()
        base = "" if base == "." else base
        if ".gitignore" in filenames:
            try:
                text = (Path(dirpath) / ".gitignore").read_text(errors="replace")
            except OSError:
                text = ""
            for raw in text.splitlines():
                lines.extend(_anchored(raw, base))
            spec = pathspec.GitIgnoreSpec.from_lines(lines)
        dirnames[:] = [
            d
            for d in dirnames
            if d != ".git" and not _matches(spec, f"{base}/{d}" if base else d, True)
        ]
    return spec


def _anchored(line: str, base: str) -> list[str]:
    """A nested ``.gitignore`` line rewritten relative to the repository root."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#") or not base:
        return [line] if stripped and not stripped.startswith("#") else []
    negate = stripped.startswith("!")
    body = stripped[1:] if negate else stripped
    prefix = "!" if negate else ""
    inner = body.rstrip("/")
    if "/" in inner:  # anchored to the .gitignore's directory
        return [f"{prefix}{base}/{body.lstrip('/')}"]
    return [f"{prefix}{base}/**/{body}"]
