"""One language server of one ``lsp`` toolset: its process, its documents, its diagnostics.

The process runs as a service of the runtime (``ToolHost.start_service``: a child of the
session actor, never of a turn), like an MCP server's. It is started by the first tool call
that needs it (that call waits at most ``start_timeout`` seconds), then ``initialize`` and
``initialized``; it runs in its own process group, watched and recorded like every tool process
(``_process.track``: it never outlives greenroom), with the scrubbed environment of tool
processes plus the toolset's ``env``.

- A server that exits or breaks the protocol fails the calls waiting on it at once with an
  error result saying what happened (exit status, last stderr line) and what to do; the next
  call starts it again.
- Closing (the runtime stops): ``shutdown``, ``exit``, then close stdin, SIGTERM and SIGKILL the
  group if it has not exited within :data:`EXIT_GRACE` seconds; shielded and bounded.
- Documents: a file a tool touches is opened (``didOpen``) with its text on disk; when the
  text on disk changed since, the server gets it again (``didChange``, the whole text).
- Diagnostics come as ``publishDiagnostics`` notifications and are kept per document.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from . import _process
from ._base import ProcessLedger, ServicesUnavailable, ToolHost
from ._lsp_rpc import Connection, ConnectionLost

log = logging.getLogger(__name__)

EXIT_GRACE = 2.0
"""Seconds a server gets to answer ``shutdown``, then to exit, then to die of SIGTERM."""
STDERR_TAIL = 4096
MAX_FILE = 8 * 1024 * 1024
"""Bytes of a file the tools send to the server at most."""

LANGUAGES = {
    ".py": "python", ".pyi": "python", ".go": "go", ".rs": "rust", ".js": "javascript",
    ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascriptreact",
    ".ts": "typescript", ".tsx": "typescriptreact", ".c": "c", ".h": "c", ".cc": "cpp",
    ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".java": "java",
    ".kt": "kotlin", ".rb": "ruby", ".php": "php", ".cs": "csharp", ".swift": "swift",
    ".scala": "scala", ".lua": "lua", ".sh": "shellscript", ".bash": "shellscript",
    ".html": "html", ".css": "css", ".scss": "scss", ".json": "json", ".yaml": "yaml",
    ".yml": "yaml", ".toml": "toml", ".md": "markdown", ".sql": "sql", ".zig": "zig",
    ".ex": "elixir", ".exs": "elixir", ".hs": "haskell", ".ml": "ocaml", ".dart": "dart",
    ".tf": "terraform", ".vue": "vue", ".svelte": "svelte", ".mod": "go.mod",
}  # fmt: skip


def language_of(path: Path) -> str:
    if path.name.lower() in ("dockerfile", "makefile"):
        return path.name.lower()
    return LANGUAGES.get(path.suffix.lower(), "plaintext")


class LspUnavailable(Exception):
    """The server cannot answer now; the message says why and what to do."""


@attrs.frozen
class LspSpec:
    """What an ``lsp`` toolset's options say (``file_types``: lower-case, with the dot)."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    working_dir: Path = attrs.field(factory=Path.cwd)
    file_types: tuple[str, ...] = ()
    start_timeout: float = 30.0
    call_timeout: float = 60.0
    diagnostics_wait: float = 3.0

    @property
    def description(self) -> str:
        return f"LSP server {self.command}"

    @property
    def root_uri(self) -> str:
        return self.working_dir.as_uri()

    def handles(self, path: Path) -> bool:
        return not self.file_types or path.suffix.lower() in self.file_types


@attrs.define(eq=False)
class _Document:
    version: int
    text: str


def client_capabilities() -> dict[str, Any]:
    """What greenroom tells a server it can do (the requests its tools send)."""
    return {
        "general": {"positionEncodings": ["utf-16"]},
        "textDocument": {
            "synchronization": {"didSave": False},
            "hover": {"contentFormat": ["markdown", "plaintext"]},
            "definition": {"linkSupport": False},
            "references": {},
            "implementation": {"linkSupport": False},
            "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
            "publishDiagnostics": {"versionSupport": True},
            "rename": {"prepareSupport": False},
            "codeAction": {
                "codeActionLiteralSupport": {
                    "codeActionKind": {
                        "valueSet": ["", "quickfix", "refactor", "source", "source.organizeImports"]
                    }
                }
            },
            "formatting": {},
            "callHierarchy": {},
            "typeHierarchy": {},
            "signatureHelp": {
                "signatureInformation": {
                    "documentationFormat": ["markdown", "plaintext"],
                    "parameterInformation": {"labelOffsetSupport": True},
                }
            },
            "inlayHint": {},
        },
        "workspace": {
            "symbol": {},
            "applyEdit": False,
            "workspaceEdit": {"documentChanges": True},
            "configuration": True,
            "workspaceFolders": True,
        },
        "window": {"workDoneProgress": False},
    }


class LspServer:
    """See the module docstring."""

    def __init__(
        self, spec: LspSpec, host: ToolHost | None, ledger: ProcessLedger | None = None
    ) -> None:
        self.spec = spec
        self._host = host
        self._ledger = ledger
        self.state = "idle"  # idle, starting, ready, stopped (exited or closed)
        self.last_error = ""
        self.capabilities: dict[str, Any] = {}
        self.server_info: dict[str, Any] = {}
        self.pid: int | None = None
        self.starts = 0
        self._conn: Connection | None = None
        self._attempt = trio.Event()
        self._ended = trio.Event()
        self._closing = trio.Event()
        self._stderr = bytearray()
        self.documents: dict[str, _Document] = {}
        self.diagnostics: dict[str, list[Any]] = {}
        self._published: dict[str, trio.Event] = {}

    # --- what the tools use ------------------------------------------------------------------

    async def connection(self) -> Connection:
        """The running server's connection, started (or started again) when needed.

        Raises:
            LspUnavailable: it could not be started within ``start_timeout`` seconds.
        """
        conn = self._conn
        if self.state == "ready" and conn is not None and not conn.closed.is_set():
            return conn
        if self._closing.is_set():
            raise LspUnavailable(f"{self.spec.description} is closed (the runtime stopped)")
        if self.state == "ready":  # it went away: let the old process be stopped first
            with trio.move_on_after(4 * EXIT_GRACE):
                await self._ended.wait()
            if self.state == "ready":
                raise LspUnavailable(f"{self.spec.description} is still stopping; try again")
        if self.state != "starting":
            if self._host is None:
                raise LspUnavailable(f"{self.spec.description} cannot start: no runtime runs it")
            self._attempt, self._ended = trio.Event(), trio.Event()
            self.state, self.last_error = "starting", ""
            try:
                self._host.start_service(self._run)
            except ServicesUnavailable:
                self.state = "idle"
                raise LspUnavailable(
                    f"{self.spec.description} cannot start: the runtime runs no services"
                ) from None
        with trio.move_on_after(self.spec.start_timeout):
            await self._attempt.wait()
        conn = self._conn
        if self.state == "ready" and conn is not None:
            return conn
        if self.state == "starting":
            raise LspUnavailable(
                f"{self.spec.description} did not start within {self.spec.start_timeout:g} "
                "seconds; try again later, or check the toolset's command"
            )
        raise LspUnavailable(self.last_error or f"{self.spec.description} failed to start")

    async def lost(self, exc: ConnectionLost) -> str:
        """The error text for a call whose server went away (waits briefly for its exit)."""
        with trio.move_on_after(EXIT_GRACE):
            await self._ended.wait()
        why = self.last_error or f"{self.spec.description} stopped: {exc}"
        return (
            f"{why}. The next lsp tool call starts it again; if it keeps stopping, check the "
            "toolset's command, args and env."
        )

    def confine(self, given: str) -> Path:
        """The file ``given`` names (relative: to the working directory), symlinks resolved.

        Raises:
            LspUnavailable: it is outside the working directory.
        """
        root = Path(os.path.realpath(self.spec.working_dir))
        path = Path(os.path.realpath(root / given))
        if path != root and root not in path.parents:
            raise LspUnavailable(f"{given} is outside the working directory {root}")
        return path

    def resolve(self, given: str) -> Path:
        """:meth:`confine`, and a file type this server handles. Raises LspUnavailable."""
        path = self.confine(given)
        if not self.spec.handles(path):
            raise LspUnavailable(
                f"{self.spec.description} does not handle {path.suffix or 'extension-less'} "
                f"files (file_types: {', '.join(self.spec.file_types)})"
            )
        return path

    async def sync(self, conn: Connection, path: Path) -> tuple[str, bool]:
        """Open ``path`` on the server, or send its new text; (uri, whether anything was sent).

        Raises:
            LspUnavailable: the file cannot be read.
            ConnectionLost: the server went away.
        """
        try:
            file = trio.Path(path)
            if (await file.stat()).st_size > MAX_FILE:
                raise LspUnavailable(f"{path} is larger than {MAX_FILE} bytes")
            text = (await file.read_bytes()).decode("utf-8", errors="replace")
        except OSError as exc:
            raise LspUnavailable(f"cannot read {path}: {exc.strerror or exc}") from None
        uri = path.as_uri()
        doc = self.documents.get(uri)
        if doc is None:
            self.documents[uri] = _Document(1, text)
            item = {"uri": uri, "languageId": language_of(path), "version": 1, "text": text}
            await conn.notify("textDocument/didOpen", {"textDocument": item})
            return uri, True
        if doc.text == text:
            return uri, False
        doc.version, doc.text = doc.version + 1, text
        await conn.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": doc.version},
                "contentChanges": [{"text": text}],
            },
        )
        return uri, True

    def published(self, uri: str) -> trio.Event:
        """Set by the next ``publishDiagnostics`` for ``uri`` (take it before :meth:`sync`)."""
        event = self._published.get(uri)
        if event is None or event.is_set():
            event = self._published[uri] = trio.Event()
        return event

    def close(self) -> None:
        """The runtime closes: the service stops the server (it is cancelled meanwhile)."""
        self._closing.set()

    # --- the service ---------------------------------------------------------------------

    def _on_notification(self, method: str, params: Any) -> None:
        if method != "textDocument/publishDiagnostics" or not isinstance(params, dict):
            return
        uri, found = params.get("uri"), params.get("diagnostics")
        if not isinstance(uri, str) or not isinstance(found, list):
            return
        doc, version = self.documents.get(uri), params.get("version")
        if doc is not None and isinstance(version, int) and version < doc.version:
            return  # about an older text than the server has now
        self.diagnostics[uri] = found
        event = self._published.pop(uri, None)
        if event is not None:
            event.set()

    async def _run(self) -> None:
        attempt, ended = self._attempt, self._ended  # this run's (a later start has its own)
        self.starts += 1
        self._stderr = bytearray()
        spec = self.spec
        try:
            try:
                process = await trio.lowlevel.open_process(
                    [spec.command, *spec.args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=str(spec.working_dir),
                    env=dict(spec.env),
                    start_new_session=True,
                )
            except OSError as exc:
                self.last_error = f"{spec.description} could not start: {exc.strerror or exc}"
                return
            await _process.track(process, self._ledger, f"lsp {spec.command}")
            self.pid = process.pid
            try:
                await self._serve(process, attempt)
            finally:
                with trio.CancelScope(shield=True):
                    await _stop(process)
                    if self.state == "ready" or self.last_error:
                        self._note_exit(process)
                    await _process.forget_ended()
        except Exception as exc:  # anything the server throws at us ends this run only
            log.exception("LSP server %s failed", spec.command)
            self.last_error = self.last_error or f"{spec.description} failed: {exc}"
        finally:
            self.state = "stopped"
            self._conn = None
            self.documents.clear()
            self.diagnostics.clear()
            for event in self._published.values():
                event.set()
            self._published.clear()
            attempt.set()
            ended.set()

    async def _serve(self, process: trio.Process, attempt: trio.Event) -> None:
        spec = self.spec
        assert process.stdin is not None and process.stdout is not None
        conn = Connection(
            process.stdin,
            process.stdout,
            on_notification=self._on_notification,
            root_uri=spec.root_uri,
        )
        stderr_done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            nursery.start_soon(self._drain_stderr, process, stderr_done)
            try:
                with trio.move_on_after(spec.start_timeout) as starting:
                    result = await conn.request("initialize", self._initialize_params())
                    await conn.notify("initialized", {})
                if starting.cancelled_caught:
                    self.last_error = (
                        f"{spec.description} did not answer initialize within "
                        f"{spec.start_timeout:g} seconds"
                    )
                    return
                if isinstance(result, dict):
                    caps, info = result.get("capabilities"), result.get("serverInfo")
                    self.capabilities = caps if isinstance(caps, dict) else {}
                    self.server_info = info if isinstance(info, dict) else {}
                self._conn, self.state = conn, "ready"
                attempt.set()
                async with trio.open_nursery() as waiter:

                    async def until(event: trio.Event) -> None:
                        await event.wait()
                        waiter.cancel_scope.cancel()

                    waiter.start_soon(until, conn.closed)
                    waiter.start_soon(until, self._closing)
            except ConnectionLost as exc:
                self.last_error = f"{spec.description} failed to start: {exc}"
            finally:
                with trio.CancelScope(shield=True):
                    if not conn.closed.is_set() and self.state == "ready":
                        with trio.move_on_after(EXIT_GRACE):
                            with contextlib.suppress(Exception):
                                await conn.request("shutdown")
                                await conn.notify("exit")
                    if conn.closed.is_set() and not self._closing.is_set():
                        self.last_error = self.last_error or f"{spec.description} stopped"
                        with trio.move_on_after(EXIT_GRACE):
                            await stderr_done.wait()  # its last words, for the error text
                nursery.cancel_scope.cancel()

    def _initialize_params(self) -> dict[str, Any]:
        root = self.spec.root_uri
        return {
            "processId": os.getpid(),
            "clientInfo": {"name": "greenroom"},
            "rootUri": root,
            "rootPath": str(self.spec.working_dir),
            "workspaceFolders": [{"uri": root, "name": self.spec.working_dir.name or "root"}],
            "capabilities": client_capabilities(),
        }

    async def _drain_stderr(self, process: trio.Process, done: trio.Event) -> None:
        stream = process.stderr
        assert stream is not None
        try:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                while chunk := await stream.receive_some(65536):
                    self._stderr.extend(chunk)
                    del self._stderr[:-STDERR_TAIL]
        finally:
            done.set()

    def _note_exit(self, process: trio.Process) -> None:
        """Add the exit status and the last stderr line to ``last_error`` (a crash)."""
        if self._closing.is_set():
            return
        text = self.last_error or f"{self.spec.description} stopped"
        if process.returncode is not None:
            text += f" ({_process.exit_text(process.returncode)})"
        lines = self._stderr.decode(errors="replace").strip().splitlines()
        if lines:
            text += f"; stderr: {lines[-1][:300]}"
        self.last_error = text


def _signal_group(process: trio.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


async def _stop(process: trio.Process) -> None:
    """Close stdin; SIGTERM, then SIGKILL the group if it does not exit; reap. Shielded."""
    with trio.CancelScope(shield=True):
        if process.stdin is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                await process.stdin.aclose()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                _signal_group(process, sig)
            with trio.move_on_after(EXIT_GRACE):
                await process.wait()
            if process.returncode is not None:
                break
        _signal_group(process, signal.SIGKILL)  # what the server left in its group goes too
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(trio.ClosedResourceError, OSError):
                    await stream.aclose()
