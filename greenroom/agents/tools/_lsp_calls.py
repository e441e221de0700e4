"""What each ``lsp_*`` tool does on one language server (:class:`LspCalls`).

Each call checks its arguments (a bad one is an error result, without starting the server),
gets the running server (``_lsp_server.py``), opens or re-sends the files it touches, asks,
and turns the answer into text (``_lsp_text.py``). Every failure is an error result saying
what to do; no call waits longer than the start and request timeouts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from . import _lsp_text as text
from ._base import ToolResult, error
from ._lsp_edits import EditError, apply_edits, changes_of, utf16_column
from ._lsp_rpc import Connection, ConnectionLost, LspError
from ._lsp_server import LspServer, LspUnavailable

POSITION_FIELDS = ("file", "line", "character")
FAR = 999_999  # a column past any line's end (the protocol clamps it)


class BadArgument(Exception):
    """A tool argument is missing or wrong (the message names it)."""


# --- arguments -------------------------------------------------------------------------------


def _int(arguments: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = arguments.get(name)
    if value is None and default is not None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadArgument(f"{name} must be a positive integer (1-based)")
    if value < 1:
        raise BadArgument(f"{name} must be at least 1 (positions are 1-based)")
    return value


def _str(arguments: Mapping[str, Any], name: str, *, empty: bool = False) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or (not value and not empty):
        raise BadArgument(f"{name} is required")
    return value


# --- calls -----------------------------------------------------------------------------------

Work = Callable[[Connection], Awaitable[ToolResult | str]]


class LspCalls:
    """The tool calls of one server (see the module docstring)."""

    def __init__(self, server: LspServer) -> None:
        self.server = server

    async def _run(
        self,
        what: str,
        work: Work,
        arguments: Mapping[str, Any] | None = None,
        checked: tuple[str, ...] = (),
    ) -> ToolResult:
        """``work`` on the running server; ``checked`` arguments are checked first (a bad one
        is an error result without starting the server)."""
        server = self.server
        timeout = server.spec.call_timeout
        try:
            for name in checked:
                if name == "file":
                    server.resolve(_str(arguments or {}, name))
                elif name == "new_name":
                    _str(arguments or {}, name)
                else:
                    _int(arguments or {}, name)
            conn = await server.connection()
            with trio.move_on_after(timeout) as waited:
                result = await work(conn)
            if waited.cancelled_caught:
                return error(
                    f"{what} failed: {server.spec.description} did not answer within "
                    f"{timeout:g} seconds"
                )
        except BadArgument as exc:
            return error(str(exc))
        except LspUnavailable as exc:
            return error(str(exc))
        except ConnectionLost as exc:
            return error(await server.lost(exc))
        except LspError as exc:
            return error(f"{what} failed: {exc}")
        except EditError as exc:
            return error(f"{what} failed: the server's edit cannot be applied: {exc}")
        return result if isinstance(result, ToolResult) else ToolResult(result)

    async def _open(self, conn: Connection, arguments: Mapping[str, Any]) -> tuple[str, str]:
        """Open (or re-send) the ``file`` argument; (its URI, the path as given)."""
        given = _str(arguments, "file")
        uri, _ = await self.server.sync(conn, self.server.resolve(given))
        return uri, given

    def _position(self, uri: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        line, character = _int(arguments, "line") - 1, _int(arguments, "character") - 1
        doc = self.server.documents.get(uri)
        column = utf16_column(doc.text, line, character) if doc is not None else character
        return {"textDocument": {"uri": uri}, "position": {"line": line, "character": column}}

    async def _at(
        self,
        arguments: Mapping[str, Any],
        method: str,
        what: str,
        show: Callable[[Any], str],
        empty: str,
        extra: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        async def work(conn: Connection) -> str:
            uri, _ = await self._open(conn, arguments)
            result = await conn.request(method, {**self._position(uri, arguments), **(extra or {})})
            return empty if result is None or result == [] else show(result)

        return await self._run(what, work, arguments, POSITION_FIELDS)

    # --- the tools ---------------------------------------------------------------------------

    async def workspace(self, arguments: Mapping[str, Any]) -> ToolResult:
        del arguments
        spec = self.server.spec

        async def work(conn: Connection) -> str:
            del conn
            caps, info = self.server.capabilities, self.server.server_info
            return text.workspace(str(spec.working_dir), spec.command, info, spec.file_types, caps)

        return await self._run("LSP initialization", work)

    async def hover(self, arguments: Mapping[str, Any]) -> ToolResult:
        def show(result: Any) -> str:
            shown = text.markup(result.get("contents")) if isinstance(result, dict) else ""
            return shown or "No information available at this position"

        return await self._at(
            arguments,
            "textDocument/hover",
            "Hover request",
            show,
            "No information available at this position",
        )

    async def definition(self, arguments: Mapping[str, Any]) -> ToolResult:
        return await self._at(
            arguments,
            "textDocument/definition",
            "Definition request",
            text.locations,
            "No definition found at this position",
        )

    async def references(self, arguments: Mapping[str, Any]) -> ToolResult:
        include = arguments.get("include_declaration")
        context = {"includeDeclaration": include is not False}
        return await self._at(
            arguments,
            "textDocument/references",
            "References request",
            text.locations,
            "No references found",
            {"context": context},
        )

    async def implementations(self, arguments: Mapping[str, Any]) -> ToolResult:
        return await self._at(
            arguments,
            "textDocument/implementation",
            "Implementations request",
            text.locations,
            "No implementations found",
        )

    async def signature_help(self, arguments: Mapping[str, Any]) -> ToolResult:
        return await self._at(
            arguments,
            "textDocument/signatureHelp",
            "Signature help request",
            text.signature_help,
            "No signature help available at this position",
        )

    async def document_symbols(self, arguments: Mapping[str, Any]) -> ToolResult:
        async def work(conn: Connection) -> str:
            uri, _ = await self._open(conn, arguments)
            result = await conn.request(
                "textDocument/documentSymbol", {"textDocument": {"uri": uri}}
            )
            return "No symbols found in file" if not result else text.symbols(result)

        return await self._run("Document symbols request", work, arguments, ("file",))

    async def workspace_symbols(self, arguments: Mapping[str, Any]) -> ToolResult:
        async def work(conn: Connection) -> str:
            query = _str(arguments, "query", empty=True)
            result = await conn.request("workspace/symbol", {"query": query})
            if not result:
                return f"No symbols found matching '{query}'" if query else "No symbols found"
            return text.symbols(result)

        return await self._run("Workspace symbols request", work)

    async def diagnostics(self, arguments: Mapping[str, Any]) -> ToolResult:
        server = self.server

        async def work(conn: Connection) -> str:
            given = _str(arguments, "file")
            path = server.resolve(given)
            published = server.published(path.as_uri())
            uri, sent = await server.sync(conn, path)
            if sent or uri not in server.diagnostics:
                with trio.move_on_after(server.spec.diagnostics_wait):
                    await published.wait()
            found = server.diagnostics.get(uri) or []
            return text.diagnostics(given, found) if found else f"No diagnostics for {given}"

        return await self._run("Diagnostics request", work, arguments, ("file",))

    async def code_actions(self, arguments: Mapping[str, Any]) -> ToolResult:
        async def work(conn: Connection) -> str:
            uri, given = await self._open(conn, arguments)
            first = _int(arguments, "start_line")
            last = max(first, _int(arguments, "end_line", first))
            found = [
                d
                for d in self.server.diagnostics.get(uri) or []
                if isinstance(d, dict)
                and first <= (d.get("range", {}).get("start", {}).get("line", -2) + 1) <= last
            ]
            params = {
                "textDocument": {"uri": uri},
                "range": {
                    "start": {"line": first - 1, "character": 0},
                    "end": {"line": last - 1, "character": FAR},
                },
                "context": {"diagnostics": found},
            }
            result = await conn.request("textDocument/codeAction", params)
            if not result:
                return f"No code actions available for {given}:{first}"
            return text.code_actions(given, first, result)

        return await self._run("Code actions request", work, arguments, ("file", "start_line"))

    async def inlay_hints(self, arguments: Mapping[str, Any]) -> ToolResult:
        async def work(conn: Connection) -> str:
            uri, given = await self._open(conn, arguments)
            doc = self.server.documents.get(uri)
            lines = doc.text.count("\n") + 1 if doc is not None else FAR
            first = _int(arguments, "start_line", 1)
            last = _int(arguments, "end_line", lines)
            params = {
                "textDocument": {"uri": uri},
                "range": {
                    "start": {"line": first - 1, "character": 0},
                    "end": {"line": last - 1, "character": FAR},
                },
            }
            result = await conn.request("textDocument/inlayHint", params)
            if not result:
                return f"No inlay hints for {given}:{first}-{last}"
            return text.inlay_hints(given, first, last, result)

        return await self._run("Inlay hints request", work, arguments, ("file",))

    async def call_hierarchy(self, arguments: Mapping[str, Any]) -> ToolResult:
        return await self._hierarchy(
            arguments, "incoming", "outgoing", "textDocument/prepareCallHierarchy"
        )

    async def type_hierarchy(self, arguments: Mapping[str, Any]) -> ToolResult:
        return await self._hierarchy(
            arguments, "supertypes", "subtypes", "textDocument/prepareTypeHierarchy"
        )

    async def _hierarchy(
        self, arguments: Mapping[str, Any], one: str, other: str, prepare: str
    ) -> ToolResult:
        direction = arguments.get("direction")
        if direction not in (one, other):
            return error(f"direction must be '{one}' or '{other}'")
        calls = prepare.endswith("CallHierarchy")
        label = "Call hierarchy" if calls else "Type hierarchy"

        async def work(conn: Connection) -> str:
            uri, _ = await self._open(conn, arguments)
            items = await conn.request(prepare, self._position(uri, arguments))
            if not isinstance(items, list) or not items:
                return f"No {label.lower()} information available at this position"
            parts = []
            for item in items:
                name = str(item.get("name", "")) if isinstance(item, dict) else ""
                if calls:
                    found = await conn.request(f"callHierarchy/{direction}Calls", {"item": item})
                    parts.append(text.calls(name, str(direction), found))
                else:
                    found = await conn.request(f"typeHierarchy/{direction}", {"item": item})
                    parts.append(text.types(name, str(direction), found))
            return "\n".join(parts)

        return await self._run(f"{label} request", work, arguments, POSITION_FIELDS)

    async def rename(self, arguments: Mapping[str, Any]) -> ToolResult:
        async def work(conn: Connection) -> ToolResult:
            new_name = _str(arguments, "new_name")
            uri, _ = await self._open(conn, arguments)
            params = {**self._position(uri, arguments), "newName": new_name}
            edit = await conn.request("textDocument/rename", params)
            if not isinstance(edit, dict):
                return error("Cannot rename symbol at this position")
            written = await self._apply(conn, changes_of(edit))
            if not written:
                return ToolResult("No changes were needed")
            lines = [f"Renamed to '{new_name}'", f"Modified {len(written)} file(s):"]
            lines += [f"- {path} ({count} change(s))" for path, count in written]
            return ToolResult("\n".join(lines))

        return await self._run("Rename", work, arguments, (*POSITION_FIELDS, "new_name"))

    async def format(self, arguments: Mapping[str, Any]) -> ToolResult:
        async def work(conn: Connection) -> str:
            uri, given = await self._open(conn, arguments)
            options = {"tabSize": 4, "insertSpaces": True}
            params = {"textDocument": {"uri": uri}, "options": options}
            edits = await conn.request("textDocument/formatting", params)
            if not isinstance(edits, list) or not edits:
                return f"No formatting changes needed for {given}"
            written = await self._apply(conn, {uri: edits})
            count = sum(n for _, n in written)
            return f"Formatted {given}\nApplied {count} formatting change(s)"

        return await self._run("Format request", work, arguments, ("file",))

    async def _apply(
        self, conn: Connection, changes: Mapping[str, list[Mapping[str, Any]]]
    ) -> list[tuple[str, int]]:
        """Write the edits to the files (all inside the working directory, or none written);
        the server is sent the new texts. Returns (path, number of edits) per file."""
        planned: list[tuple[Path, str, int]] = []
        for uri, edits in changes.items():
            if not edits:
                continue
            if not uri.startswith("file://"):
                raise EditError(f"an edit of {uri}, which is not a file")
            path = self.server.confine(text.path_of(uri))
            try:
                original = (await trio.Path(path).read_bytes()).decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise EditError(f"cannot read {path}: {exc}") from None
            planned.append((path, apply_edits(original, edits), len(edits)))
        for path, new_text, _ in planned:
            try:
                await trio.Path(path).write_bytes(new_text.encode("utf-8"))
            except OSError as exc:
                raise EditError(f"cannot write {path}: {exc.strerror or exc}") from None
        for path, _, _ in planned:
            if path.as_uri() in self.server.documents:
                await self.server.sync(conn, path)
        return [(str(path), count) for path, _, count in planned]
