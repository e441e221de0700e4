"""Agent sources: the agent files a server offers, each under a key (its file name, no extension).

A file is re-read when its modification time or size changes, checked on every access, so an
edit is served without a restart. A broken edit keeps the last good version (logged once per
edit); a file that never loaded is an error for ``get`` and skipped by ``list``.

Reading is synchronous: agent files are small local files and a ``stat`` per access is cheap.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from greenroom.errors import AgentConfigError, AgentNotFound

from ._config import AgentFile, agent_file_to_json
from ._yaml import load_agent_file
from ._yaml_external import ExternalAgents

log = logging.getLogger(__name__)

AGENT_FILE_SUFFIXES = (".yaml", ".yml")
BUNDLED_DIR = Path(__file__).parent / "bundled"
DEFAULT_SOURCE_KEY = "default"


def bundled_agent_path(name: str = DEFAULT_SOURCE_KEY) -> Path:
    """The path of a bundled example agent file (``default`` serves when no file is given)."""
    return BUNDLED_DIR / f"{name}.yaml"


def agent_files_in(directory: Path) -> list[Path]:
    """The agent files (``*.yaml``, ``*.yml``) directly inside ``directory``, sorted."""
    return sorted(p for p in directory.iterdir() if p.suffix in AGENT_FILE_SUFFIXES and p.is_file())


@attrs.frozen
class AgentEntry:
    """A row of ``GET /api/agents``."""

    name: str
    description: str
    multi: bool
    commands: tuple[str, ...] = ()
    # A remote source: ``source`` (its URL or OCI reference) and, after a failed fetch,
    # ``source_error`` (why; the last good copy is served).
    origin: Mapping[str, Any] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "multi": self.multi,
        }
        if self.commands:
            out["commands"] = list(self.commands)
        out.update(self.origin)
        return out


@attrs.define
class _Cached:
    signature: tuple[int, ...] | None = None
    good: AgentFile | None = None
    error: AgentConfigError | None = None


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _key_of(path: Path) -> str:
    return path.stem


class AgentSources:
    """Agent files by key; see the module docstring for reloading rules."""

    def __init__(
        self,
        files: Mapping[str, str | os.PathLike[str]],
        external: ExternalAgents | None = None,
    ) -> None:
        self._paths = {key: Path(path) for key, path in files.items()}
        self._cache = {key: _Cached() for key in self._paths}
        # Sub-agents from a catalog or registry (``greenroom serve``); when one changes (its
        # ``generation``), the files are read again.
        self.external = external
        # A remote source's row fields (source, source_error): RemoteSources.row, when serving.
        self.origin_of: Callable[[str], Mapping[str, Any]] = lambda key: {}

    def files(self) -> dict[str, Path]:
        """Every source's key and file."""
        return dict(self._paths)

    def _generation(self) -> int:
        return int(getattr(self.external, "generation", 0))

    @classmethod
    def from_paths(cls, paths: Iterable[str | os.PathLike[str]]) -> AgentSources:
        """Sources from agent files and directories (their ``*.yaml``/``*.yml`` files).

        Raises:
            AgentConfigError: a path does not exist, or two files share a key.
        """
        files: dict[str, Path] = {}
        for raw in paths:
            path = Path(raw)
            if path.is_dir():
                found = agent_files_in(path)
            elif path.exists():
                found = [path]
            else:
                raise AgentConfigError([f"{path}: no such agent file or directory"])
            for file in found:
                key = _key_of(file)
                if key in files and files[key] != file:
                    raise AgentConfigError(
                        [f"{file}: agent source key {key!r} is also used by {files[key]}"]
                    )
                files[key] = file
        return cls(files)

    @classmethod
    def bundled(cls) -> AgentSources:
        """The bundled ``default`` agent alone: what a server offers when given no file."""
        return cls({DEFAULT_SOURCE_KEY: bundled_agent_path()})

    def keys(self) -> list[str]:
        return sorted(self._paths)

    def check_all(self) -> None:
        """Read every file once, without logging, and report every fault of every file.

        Raises:
            AgentConfigError: one problem (``file:line: path: what``) per fault, all files.
        """
        problems: list[str] = []
        for key in self.keys():
            try:
                load_agent_file(self.path(key), self.external)
            except AgentConfigError as exc:
                problems.extend(exc.problems)
        if problems:
            raise AgentConfigError(problems)

    def path(self, key: str) -> Path:
        try:
            return self._paths[key]
        except KeyError:
            raise AgentNotFound(f"agent source not found: {key}") from None

    def get(self, key: str) -> AgentFile:
        """The current parsed file of source ``key``.

        Raises:
            AgentNotFound: no source has this key.
            AgentConfigError: the file has never loaded successfully.
        """
        path = self.path(key)
        cached = self._cache[key]
        signature: tuple[int, ...] | None = _signature(path)
        if signature is not None and self.external is not None:
            signature = (*signature, self._generation())
        if signature != cached.signature or (signature is None and cached.good is None):
            self._reload(key, path, cached, signature)
        if cached.good is None:
            assert cached.error is not None
            raise cached.error
        return cached.good

    def get_json(self, key: str) -> dict[str, Any]:
        """The JSON view of source ``key`` (``GET /api/agents/{id}``); raises as :meth:`get`."""
        return agent_file_to_json(self.get(key))

    def list(self) -> list[AgentEntry]:
        """Every source that loads, sorted by key; broken ones are skipped (and logged)."""
        entries = []
        for key in self.keys():
            try:
                config = self.get(key)
            except AgentConfigError:
                continue
            first = config.first_agent
            entries.append(
                AgentEntry(
                    name=key,
                    description=first.description,
                    multi=len(config.agents) > 1,
                    commands=tuple(sorted(first.commands)),
                    origin=self.origin_of(key),
                )
            )
        return entries

    def _reload(
        self, key: str, path: Path, cached: _Cached, signature: tuple[int, ...] | None
    ) -> None:
        cached.signature = signature
        try:
            config = load_agent_file(path, self.external)
        except AgentConfigError as exc:
            cached.error = exc
            if cached.good is not None:
                log.warning(
                    "agent source %r: keeping the last good version; the edit is broken:\n%s",
                    key,
                    exc.message,
                )
            else:
                log.warning("agent source %r does not load:\n%s", key, exc.message)
            return
        if cached.good is not None:  # the first load's warnings are the server's to print
            log.info("agent source %r reloaded from %s", key, path)
            for line in config.warnings:
                log.warning("%s", line)
        cached.good, cached.error = config, None
