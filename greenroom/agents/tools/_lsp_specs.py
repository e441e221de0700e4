"""The ``lsp_*`` tools as the model sees them: docker-agent's names, titles, parameters and
whether each only reads (the two that write files, ``lsp_rename`` and ``lsp_format``, ask for
confirmation by default)."""

from __future__ import annotations

from typing import Any

import attrs

from ..providers._base import ToolSpec
from ._base import schema, string

INSTRUCTIONS = """# Code intelligence (LSP tools)

The lsp_* tools ask a language server about the code: give a file path (relative to the working
directory, or absolute inside it) and, where needed, a 1-based line and character.

- Begin with lsp_workspace to see which features this server offers.
- Locate code with lsp_workspace_symbols (fuzzy search), outline a file with
  lsp_document_symbols, read types and docs with lsp_hover, jump with lsp_definition, and follow
  dependencies with lsp_call_hierarchy or lsp_type_hierarchy.
- Before you change a symbol's definition, call lsp_references to find every use (and
  lsp_implementations before changing an interface).
- After each edit, call lsp_diagnostics on the edited files; lsp_code_actions lists fixes for
  what it reports. Hint and info diagnostics can usually be ignored.
- When the code is free of errors, lsp_format tidies a file. lsp_rename and lsp_format write
  files on disk."""


def _integer(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


FILE = {"file": string("Path of the source file (relative to the working directory)")}
POSITION = {
    **FILE,
    "line": _integer("Line number (1-based)"),
    "character": _integer("Character position on the line (1-based)"),
}
POSITION_REQUIRED = ("file", "line", "character")


@attrs.frozen
class LspToolDef:
    spec: ToolSpec
    title: str
    read_only: bool


def _def(
    name: str,
    title: str,
    description: str,
    properties: dict[str, Any],
    required: tuple[str, ...],
    *,
    read_only: bool = True,
) -> LspToolDef:
    return LspToolDef(ToolSpec(name, description, schema(properties, required)), title, read_only)


DEFS = (
    _def(
        "lsp_workspace",
        "Get Workspace Info",
        "Get workspace info and the LSP server's capabilities. Use it at the start of a "
        "session to see which features are available. Takes no arguments.",
        {},
        (),
    ),
    _def(
        "lsp_hover",
        "Get Symbol Info",
        "Get the type signature, documentation and hover info of the symbol at a position.",
        POSITION,
        POSITION_REQUIRED,
    ),
    _def(
        "lsp_definition",
        "Go to Definition",
        "Find where the symbol at a position is defined. Returns file paths and line numbers.",
        POSITION,
        POSITION_REQUIRED,
    ),
    _def(
        "lsp_references",
        "Find References",
        "Find every reference to the symbol at a position across the codebase. IMPORTANT: use "
        "it before modifying any symbol definition. Set include_declaration to false to leave "
        "the definition itself out.",
        {
            **POSITION,
            "include_declaration": {
                "type": "boolean",
                "description": "Include the declaration in the results (default: true)",
            },
        },
        POSITION_REQUIRED,
    ),
    _def(
        "lsp_document_symbols",
        "List File Symbols",
        "List the symbols (functions, types, methods, variables...) defined in a file, as a "
        "hierarchy.",
        FILE,
        ("file",),
    ),
    _def(
        "lsp_workspace_symbols",
        "Search Workspace Symbols",
        "Search symbols across the workspace by fuzzy matching. The main tool to locate symbols.",
        {"query": string("Search query to filter symbols (fuzzy matching)")},
        ("query",),
    ),
    _def(
        "lsp_diagnostics",
        "Get Diagnostics",
        "Get the compiler errors, warnings and hints of a file. IMPORTANT: call it on edited "
        "files after every modification. lsp_code_actions suggests fixes.",
        FILE,
        ("file",),
    ),
    _def(
        "lsp_rename",
        "Rename Symbol",
        "Rename the symbol at a position across the workspace. WRITE operation: modifies files "
        "on disk. Run lsp_diagnostics on the modified files afterwards.",
        {**POSITION, "new_name": string("The new name for the symbol")},
        (*POSITION_REQUIRED, "new_name"),
        read_only=False,
    ),
    _def(
        "lsp_code_actions",
        "Get Code Actions",
        "Get the code actions (quick fixes, refactorings) available for a line or a range of "
        "lines. Use it after lsp_diagnostics reports problems.",
        {
            **FILE,
            "start_line": _integer("Start line of the range (1-based)"),
            "end_line": _integer("End line of the range (1-based, default: start_line)"),
        },
        ("file", "start_line"),
    ),
    _def(
        "lsp_format",
        "Format File",
        "Format a file the way its language's formatter does. WRITE operation: modifies the "
        "file on disk. Format only once lsp_diagnostics reports no errors.",
        FILE,
        ("file",),
        read_only=False,
    ),
    _def(
        "lsp_call_hierarchy",
        "Call Hierarchy",
        "The call hierarchy of a function or method. Direction: 'incoming' (who calls it) or "
        "'outgoing' (what it calls).",
        {**POSITION, "direction": string("Direction: 'incoming' or 'outgoing'")},
        (*POSITION_REQUIRED, "direction"),
    ),
    _def(
        "lsp_type_hierarchy",
        "Type Hierarchy",
        "The type hierarchy of a type. Direction: 'supertypes' (parent types) or 'subtypes' "
        "(child types).",
        {**POSITION, "direction": string("Direction: 'supertypes' or 'subtypes'")},
        (*POSITION_REQUIRED, "direction"),
    ),
    _def(
        "lsp_implementations",
        "Find Implementations",
        "Find the concrete implementations of an interface or abstract method. IMPORTANT: use "
        "it before modifying an interface, to find every implementation to update.",
        POSITION,
        POSITION_REQUIRED,
    ),
    _def(
        "lsp_signature_help",
        "Signature Help",
        "The signature and parameters of the function called at a position: put the position "
        "inside the call's parentheses.",
        POSITION,
        POSITION_REQUIRED,
    ),
    _def(
        "lsp_inlay_hints",
        "Inlay Hints",
        "Inlay hints (inferred types, parameter names) of a file or of a range of lines. Leave "
        "out start_line and end_line for the whole file.",
        {
            **FILE,
            "start_line": _integer("Start line of the range (1-based, default: 1)"),
            "end_line": _integer("End line of the range (1-based, default: end of file)"),
        },
        ("file",),
    ),
)
NAMES = tuple(d.spec.name for d in DEFS)
