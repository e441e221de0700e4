"""Code-aware chunking (``chunking.code_aware``): source files cut at their functions.

A Go file (docker-agent's one language) or a Python file (a greenroom extension) is parsed
with tree-sitter; each function or method, with the comments right above it, is a *unit*,
and so is each stretch of code between them (package clause, imports, types, constants).
Units are packed in file order into chunks of at most ``size`` characters, so a chunk is a
contiguous slice of the file and a function that fits is never cut. A unit bigger than
``size`` is cut by the text chunker (a Python class first gives up its methods as units).
Other files, and files that cannot be encoded, are cut by the text chunker alone.

Each chunk carries the symbols it holds; :meth:`CodeChunk.ast_context` formats them for a
semantic prompt's ``${ast_context}``. The grammars are imported on first use (light start);
a parser is made per call, so calls may run in several worker threads at once.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import attrs

from .._rag_config import RagChunking
from ._rag_index import chunk_text

LANGUAGES = {".go": "go", ".py": "python", ".pyi": "python"}
"""File extensions (lower case) cut at their functions, and their grammar."""
_SIGNATURE_MAX = 240
_DOC_MAX = 400
_MAX_NESTING = 8
"""Classes nested deeper are not opened at their methods (a bound on recursion)."""


@attrs.frozen
class Symbol:
    """A function, method or class of a chunk (docker-agent's chunk metadata)."""

    name: str
    kind: str
    """``function``, ``method`` or (Python) ``class``."""
    signature: str
    start_line: int
    end_line: int
    receiver: str = ""
    """A Go method's receiver; a Python method's class."""
    doc: str = ""
    package: str = ""
    language: str = "go"


@attrs.frozen
class CodeChunk:
    content: str
    symbols: tuple[Symbol, ...] = ()

    def ast_context(self) -> str:
        """The chunk's first symbol, and the names of the others, as lines for a prompt
        (empty for a chunk without symbols)."""
        if not self.symbols:
            return ""
        first = self.symbols[0]
        fields = [
            ("Symbol", first.name),
            ("Kind", first.kind),
            ("Receiver" if first.language == "go" else "Class", first.receiver),
            ("Signature", first.signature),
            ("Doc", first.doc),
            ("Package", first.package),
            ("Lines", f"{first.start_line}-{first.end_line}"),
            ("Also contains", ", ".join(s.name for s in self.symbols[1:])),
        ]
        return "AST context:\n" + "\n".join(f"- {k}: {v}" for k, v in fields if v)


@cache
def _language(name: str) -> Any:
    import tree_sitter

    if name == "go":
        import tree_sitter_go

        return tree_sitter.Language(tree_sitter_go.language())
    import tree_sitter_python

    return tree_sitter.Language(tree_sitter_python.language())


def language_of(path: str) -> str | None:
    """The grammar ``path`` is parsed with (None: cut as plain text)."""
    return LANGUAGES.get(_suffix(path))


def _suffix(path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return "." + name.rsplit(".", 1)[1].lower() if "." in name.lstrip(".") else ""


def code_chunks(path: str, text: str, chunking: RagChunking) -> list[CodeChunk]:
    """``text`` (the file at ``path``) cut into chunks; see the module docstring."""
    language = language_of(path)
    if language is None:
        return _plain(text, chunking)
    try:
        source = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: byte offsets would not map back
        return _plain(text, chunking)
    import tree_sitter

    tree = tree_sitter.Parser(_language(language)).parse(source)
    cutter = _Cutter(language, source, chunking)
    units = cutter.units(cutter.definitions(tree.root_node), 0, len(source), "")
    if not any(unit.symbol for unit in units):
        return _plain(text, chunking)
    return cutter.pack(units)


def _plain(text: str, chunking: RagChunking) -> list[CodeChunk]:
    return [CodeChunk(piece) for piece in chunk_text(text, chunking)]


@attrs.frozen
class _Unit:
    start: int
    end: int
    symbol: Symbol | None = None


_GO_DEFINITIONS = {"function_declaration", "method_declaration"}
_PY_DEFINITIONS = {"function_definition", "class_definition", "decorated_definition"}


class _Cutter:
    """One file's units and chunks (byte offsets into ``source``)."""

    def __init__(self, language: str, source: bytes, chunking: RagChunking) -> None:
        self.language = language
        self.source = source
        self.chunking = chunking
        self.package = ""
        self._definitions = _GO_DEFINITIONS if language == "go" else _PY_DEFINITIONS

    def text(self, start: int, end: int) -> str:
        return self.source[start:end].decode("utf-8", errors="replace")

    def definitions(self, node: Any) -> list[Any]:
        """The outermost function-like nodes under ``node``, in file order."""
        found: list[Any] = []
        stack = [node]
        while stack:
            current = stack.pop()
            if current.type == "package_clause":
                name = current.named_children[-1] if current.named_children else None
                self.package = self.text(name.start_byte, name.end_byte) if name else ""
            if current is not node and current.type in self._definitions:
                found.append(current)
            else:
                stack.extend(reversed(current.children))
        return found

    def units(
        self, definitions: list[Any], start: int, end: int, owner: str, depth: int = 0
    ) -> list[_Unit]:
        """``start..end`` as units: each definition (with its comments) and the gaps."""
        out: list[_Unit] = []
        position = start
        for node in definitions:
            begin = max(self._comments_above(node), position)
            if begin > position:
                out.append(_Unit(position, begin))
            inner = self._members(node) if depth < _MAX_NESTING else []
            if inner and len(self.text(begin, node.end_byte).strip()) > self.chunking.size:
                name = self._name(node)
                out.extend(self.units(inner, begin, node.end_byte, name, depth + 1))
            else:
                out.append(_Unit(begin, node.end_byte, self._symbol(node, begin, owner)))
            position = node.end_byte
        if end > position:
            out.append(_Unit(position, end))
        return out

    def pack(self, units: list[_Unit]) -> list[CodeChunk]:
        size = self.chunking.size
        out: list[CodeChunk] = []
        group: list[_Unit] = []

        def flush() -> None:
            if group:
                content = self.text(group[0].start, group[-1].end).strip()
                symbols = tuple(u.symbol for u in group if u.symbol is not None)
                if content:
                    out.append(CodeChunk(content, symbols))
                group.clear()

        for unit in units:
            alone = self.text(unit.start, unit.end).strip()
            if not alone:
                continue
            if len(alone) > size:
                flush()
                symbols = (unit.symbol,) if unit.symbol else ()
                out.extend(CodeChunk(p, symbols) for p in chunk_text(alone, self.chunking))
                continue
            if group and len(self.text(group[0].start, unit.end).strip()) > size:
                flush()
            group.append(unit)
        flush()
        return out

    # --- one definition --------------------------------------------------------------------

    def _comments_above(self, node: Any) -> int:
        """Where ``node``'s leading comments start: comment lines right above it (no blank
        line between), each on a line of its own."""
        start: int = node.start_byte
        sibling = node.prev_sibling
        while sibling is not None and sibling.type == "comment":
            gap = self.source[sibling.end_byte : start]
            line_start = self.source.rfind(b"\n", 0, sibling.start_byte) + 1
            if gap.count(b"\n") > 1 or self.source[line_start : sibling.start_byte].strip():
                break
            start = sibling.start_byte
            sibling = sibling.prev_sibling
        return start

    def _inner(self, node: Any) -> Any:
        """A Python decorated definition's function or class (else ``node``)."""
        if node.type == "decorated_definition":
            return node.child_by_field_name("definition") or node
        return node

    def _members(self, node: Any) -> list[Any]:
        """A Python class's own definitions (methods, nested classes); none otherwise."""
        node = self._inner(node)
        body = node.child_by_field_name("body")
        if node.type != "class_definition" or body is None:
            return []
        return [c for c in body.children if c.type in self._definitions]

    def _name(self, node: Any) -> str:
        name = self._inner(node).child_by_field_name("name")
        return self.text(name.start_byte, name.end_byte) if name is not None else ""

    def _symbol(self, node: Any, begin: int, owner: str) -> Symbol:
        inner = self._inner(node)
        body = inner.child_by_field_name("body")
        header = self.text(inner.start_byte, body.start_byte if body else inner.end_byte)
        doc = self.text(begin, node.start_byte).strip()
        receiver = owner
        if self.language == "go":
            kind = "method" if node.type == "method_declaration" else "function"
            field = node.child_by_field_name("receiver")
            receiver = self.text(field.start_byte, field.end_byte) if field else ""
        else:
            kind = (
                "class" if inner.type == "class_definition" else "method" if owner else "function"
            )
            doc = self._docstring(body) or doc
        return Symbol(
            name=self._name(node),
            kind=kind,
            signature=_shorten(" ".join(header.split()), _SIGNATURE_MAX),
            start_line=node.start_point[0] + 1,
            end_line=node.end_point[0] + 1,
            receiver=receiver,
            doc=_shorten(" ".join(doc.split()), _DOC_MAX),
            package=self.package,
            language=self.language,
        )

    def _docstring(self, body: Any) -> str:
        first = body.named_children[0] if body is not None and body.named_children else None
        if first is None or first.type != "expression_statement":
            return ""
        string = first.named_children[0] if first.named_children else None
        if string is None or string.type != "string":
            return ""
        return _unquote(self.text(string.start_byte, string.end_byte))


_QUOTES = re.compile(r'^[rRbBuUfF]*("""|\'\'\'|"|\')|("""|\'\'\'|"|\')$')


def _unquote(literal: str) -> str:
    return _QUOTES.sub("", literal).strip()


def _shorten(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:limit] + "…"
