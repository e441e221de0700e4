"""What the ``lsp_*`` tools tell the model: a server's answers as short text (docker-agent's).

Positions are shown 1-based (``path:line:column``); paths are plain file paths, not URIs.
Anything a server sends that does not have the expected shape is shown as its JSON.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

SYMBOL_KINDS = (
    "File", "Module", "Namespace", "Package", "Class", "Method", "Property", "Field",
    "Constructor", "Enum", "Interface", "Function", "Variable", "Constant", "String", "Number",
    "Boolean", "Array", "Object", "Key", "Null", "EnumMember", "Struct", "Event", "Operator",
    "TypeParameter",
)  # fmt: skip
SEVERITIES = {1: "Error", 2: "Warning", 3: "Info", 4: "Hint"}
CAPABILITIES = (
    ("Hover", "hoverProvider"),
    ("Go to Definition", "definitionProvider"),
    ("Find References", "referencesProvider"),
    ("Find Implementations", "implementationProvider"),
    ("Document Symbols", "documentSymbolProvider"),
    ("Workspace Symbols", "workspaceSymbolProvider"),
    ("Code Actions", "codeActionProvider"),
    ("Formatting", "documentFormattingProvider"),
    ("Rename", "renameProvider"),
    ("Call Hierarchy", "callHierarchyProvider"),
    ("Type Hierarchy", "typeHierarchyProvider"),
    ("Signature Help", "signatureHelpProvider"),
    ("Inlay Hints", "inlayHintProvider"),
)


def raw(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def path_of(uri: str) -> str:
    """A ``file://`` URI as a path (other URIs unchanged)."""
    if uri.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    return uri


def kind_name(kind: Any) -> str:
    if isinstance(kind, int) and 1 <= kind <= len(SYMBOL_KINDS):
        return SYMBOL_KINDS[kind - 1]
    return f"Kind{kind}"


def _start(rng: Any) -> tuple[int, int]:
    start = rng.get("start") if isinstance(rng, Mapping) else None
    if isinstance(start, Mapping):
        line, char = start.get("line"), start.get("character")
        if isinstance(line, int) and isinstance(char, int):
            return line + 1, char + 1
    return 0, 0


def markup(contents: Any) -> str:
    """Hover contents (a string, MarkupContent, MarkedString or a list of them) as text."""
    if isinstance(contents, str):
        return contents
    if isinstance(contents, Mapping):
        value = contents.get("value")
        return value if isinstance(value, str) else raw(contents)
    if isinstance(contents, list):
        return "\n\n".join(part for part in (markup(c) for c in contents) if part)
    return "" if contents is None else raw(contents)


def location(item: Mapping[str, Any]) -> str:
    uri = item.get("uri", item.get("targetUri", ""))
    rng = item.get("range", item.get("targetSelectionRange"))
    line, char = _start(rng)
    return f"- {path_of(str(uri))}:{line}:{char}"


def locations(result: Any) -> str:
    """A Location, a list of Locations or LocationLinks."""
    if isinstance(result, Mapping):
        return location(result)
    if isinstance(result, list):
        lines = [location(item) for item in result if isinstance(item, Mapping)]
        if not lines:
            return "No locations found"
        return f"Found {len(lines)} location(s):\n" + "\n".join(lines)
    return raw(result)


def _document_symbols(symbols: list[Any], indent: str, out: list[str]) -> None:
    for s in symbols:
        if not isinstance(s, Mapping):
            continue
        line, _ = _start(s.get("range"))
        out.append(f"{indent}- {kind_name(s.get('kind'))} {s.get('name', '')} (line {line})")
        children = s.get("children")
        if isinstance(children, list):
            _document_symbols(children, indent + "  ", out)


def symbols(result: Any) -> str:
    """DocumentSymbols (a tree) or SymbolInformation / WorkspaceSymbols (a flat list)."""
    if not isinstance(result, list):
        return raw(result)
    out: list[str] = []
    if result and isinstance(result[0], Mapping) and "location" not in result[0]:
        _document_symbols(result, "", out)
        return "\n".join(out)
    for s in result:
        if not isinstance(s, Mapping):
            continue
        where = s.get("location")
        where = where if isinstance(where, Mapping) else {}
        line, _ = _start(where.get("range"))
        file = path_of(str(where.get("uri", "")))
        text = f"- {kind_name(s.get('kind'))} {s.get('name', '')} ({file}"
        text += f":{line})" if line else ")"
        if s.get("containerName"):
            text += f" [in {s['containerName']}]"
        out.append(text)
    return "\n".join(out) if out else "No symbols found"


def diagnostics(file: str, found: list[Any]) -> str:
    lines = [f"Diagnostics for {file}:"]
    for d in found:
        if not isinstance(d, Mapping):
            continue
        line, char = _start(d.get("range"))
        severity = SEVERITIES.get(d.get("severity") or 0, "Unknown")
        source = f" ({d['source']})" if isinstance(d.get("source"), str) and d["source"] else ""
        lines.append(f"- [{severity}] Line {line}, Col {char}: {d.get('message', '')}{source}")
    return "\n".join(lines)


def capability(value: Any) -> str:
    return "No" if value is None or value is False else "Yes"


def workspace(
    root: str, command: str, info: Mapping[str, Any], file_types: tuple[str, ...], caps: Any
) -> str:
    lines = ["Workspace Information:", f"- Root: {root}", f"- LSP Command: {command}"]
    name = info.get("name")
    if isinstance(name, str) and name:
        version = info.get("version")
        lines.append(f"- Server: {name}" + (f" {version}" if isinstance(version, str) else ""))
    lines.append(f"- File types: {', '.join(file_types) if file_types else 'all'}")
    lines += ["", "Available Capabilities:"]
    if isinstance(caps, Mapping):
        lines += [f"- {label}: {capability(caps.get(key))}" for label, key in CAPABILITIES]
    else:
        lines.append("- (capabilities not available)")
    return "\n".join(lines)


def code_actions(file: str, line: int, result: Any) -> str:
    if not isinstance(result, list):
        return raw(result)
    lines = [f"Available code actions for {file}:{line}:"]
    for number, action in enumerate((a for a in result if isinstance(a, Mapping)), 1):
        kind = action.get("kind") or ("command" if "command" in action else "action")
        preferred = " (preferred)" if action.get("isPreferred") else ""
        lines.append(f"{number}. [{kind}] {action.get('title', '')}{preferred}")
    return "\n".join(lines)


def hierarchy_item(item: Any) -> str:
    if not isinstance(item, Mapping):
        return f"- {raw(item)}"
    line, _ = _start(item.get("range"))
    detail = f" [{item['detail']}]" if item.get("detail") else ""
    where = f"{path_of(str(item.get('uri', '')))}:{line}"
    return f"- {kind_name(item.get('kind'))} {item.get('name', '')} ({where}){detail}"


def calls(name: str, direction: str, result: Any) -> str:
    if not isinstance(result, list):
        return raw(result)
    if not result:
        return f"No {direction} calls {'to' if direction == 'incoming' else 'from'} '{name}'"
    key = "from" if direction == "incoming" else "to"
    title = f"Incoming calls to '{name}':" if key == "from" else f"Outgoing calls from '{name}':"
    lines = [title]
    for call in result:
        if not isinstance(call, Mapping):
            continue
        text = hierarchy_item(call.get(key))
        ranges = call.get("fromRanges")
        if key == "from" and isinstance(ranges, list) and ranges:
            text += " calls at line(s) " + ", ".join(str(_start(r)[0]) for r in ranges)
        lines.append(text)
    return "\n".join(lines)


def types(name: str, direction: str, result: Any) -> str:
    if not isinstance(result, list):
        return raw(result)
    if not result:
        return f"No {direction} for '{name}'"
    return "\n".join([f"{direction.capitalize()} of '{name}':", *map(hierarchy_item, result)])


def _label(label: Any, signature: str) -> str:
    if isinstance(label, list) and len(label) == 2 and all(isinstance(i, int) for i in label):
        return signature[label[0] : label[1]]  # offsets into the signature's label
    return label if isinstance(label, str) else raw(label)


def signature_help(result: Any) -> str:
    if not isinstance(result, Mapping):
        return raw(result)
    signatures = [s for s in result.get("signatures") or [] if isinstance(s, Mapping)]
    if not signatures:
        return "No signature help available"
    active_signature = result.get("activeSignature") or 0
    lines: list[str] = []
    for index, sig in enumerate(signatures):
        label = str(sig.get("label", ""))
        if index:
            lines.append("")
        lines.append(f"Function: {label}" + (" [ACTIVE]" if index == active_signature else ""))
        doc = markup(sig.get("documentation"))
        if doc:
            lines += ["", doc]
        params = [p for p in sig.get("parameters") or [] if isinstance(p, Mapping)]
        if params:
            active = sig.get("activeParameter", result.get("activeParameter")) or 0
            lines += ["", "Parameters:"]
            for number, param in enumerate(params):
                text = f"{number + 1}. {_label(param.get('label'), label)}"
                text += " [ACTIVE]" if number == active else ""
                pdoc = markup(param.get("documentation"))
                lines.append(text + (f" - {pdoc}" if pdoc else ""))
    return "\n".join(lines)


def inlay_hints(file: str, first: int, last: int, result: Any) -> str:
    if not isinstance(result, list):
        return raw(result)
    if not result:
        return f"No inlay hints for {file}:{first}-{last}"
    lines = [f"Inlay hints for {file}:{first}-{last}:"]
    for hint in result:
        if not isinstance(hint, Mapping):
            continue
        label = hint.get("label")
        if isinstance(label, list):
            label = "".join(str(p.get("value", "")) for p in label if isinstance(p, Mapping))
        position = hint.get("position")
        line, char = _start({"start": position})
        kind = {1: "type", 2: "parameter"}.get(hint.get("kind") or 0, "hint")
        lines.append(f"- Line {line}, Col {char}: '{label}' ({kind})")
    return "\n".join(lines)
