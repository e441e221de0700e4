"""Helpers that check YAML values and find their lines (ruamel.yaml round-trip nodes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def describe(value: object) -> str:
    """The kind of ``value``, with the value itself for scalars (``string 'yes'``)."""
    kind = kind_of(value)
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"{kind} {text!r}"
    if isinstance(value, int | float):
        return f"{kind} {value}"
    return kind


def line_of(container: Any, key: Any, *, value: bool = True) -> int | None:
    """1-based line of ``container[key]`` (its value, or its key), None when unknown."""
    lc = getattr(container, "lc", None)
    if lc is None:
        return None
    try:
        if isinstance(container, list):
            return int(lc.item(key)[0]) + 1
        return int((lc.value(key) if value else lc.key(key))[0]) + 1
    except (KeyError, IndexError, TypeError, AttributeError):
        # Keys merged in with ``<<:`` have no position of their own.
        return None


def own_line(container: Any, fallback: int) -> int:
    lc = getattr(container, "lc", None)
    line = getattr(lc, "line", None)
    return line + 1 if isinstance(line, int) else fallback


IGNORED = "ignored: greenroom does not implement this key"


class Checker:
    """Collects problems (errors) and warnings while the tree is walked."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[tuple[int, str, str]] = []
        self.warnings: list[tuple[int, str, str]] = []
        # Sub-agents from a catalog, registry or URL: resolved after the walk when the file is
        # loaded with an external-agent lookup (``_yaml_external.py``), else warned about.
        self.resolve_external = False
        self.external: list[tuple[int, str, str]] = []  # (line, path, reference)

    def fail(self, line: int, path: str, what: str) -> None:
        self.problems.append((line, path, what))

    def warn(self, line: int, path: str, what: str) -> None:
        """Something greenroom accepts but will not do as written."""
        self.warnings.append((line, path, what))

    def lines(self) -> list[str]:
        return format_lines(self.file, self.problems)

    def warning_lines(self) -> list[str]:
        return format_lines(self.file, self.warnings, prefix="warning: ")

    def keys(
        self,
        mapping: Mapping[Any, Any],
        allowed: set[str],
        ignored: set[str],
        path: str,
        unsupported: Mapping[str, str] | None = None,
    ) -> None:
        """Report unknown keys (and non-string ones); note ignored docker-agent keys."""
        for key in mapping:
            line = line_of(mapping, key, value=False) or own_line(mapping, 1)
            if not isinstance(key, str):
                self.fail(line, path or "(document)", f"key {key!r} is not a string")
            elif unsupported and key in unsupported:
                self.fail(line, join(path, key), unsupported[key])
            elif key in ignored:
                self.warn(line, join(path, key), IGNORED)
            elif key not in allowed:
                known = ", ".join(sorted(allowed))
                self.fail(line, join(path, key), f"unknown key (expected one of: {known})")

    def typed(
        self,
        mapping: Mapping[Any, Any],
        key: str,
        path: str,
        check: Callable[[Any], T | None],
        expected: str,
    ) -> T | None:
        value = mapping[key]
        result = check(value)
        if result is None:
            line = line_of(mapping, key) or own_line(mapping, 1)
            self.fail(line, join(path, key), f"expected {expected}, got {describe(value)}")
        return result


def format_lines(file: str, items: list[tuple[int, str, str]], *, prefix: str = "") -> list[str]:
    """``file:line: path: [prefix]what`` for each item, in line order."""
    ordered = sorted(items, key=lambda p: p[0])
    return [f"{file}:{line}: {path}: {prefix}{what}" for line, path, what in ordered]


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def as_str(value: Any) -> str | None:
    return str(value) if isinstance(value, str) else None


def as_bool(value: Any) -> bool | None:
    return bool(value) if isinstance(value, bool) else None


def as_count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return int(value)
    return None


def as_positive(value: Any) -> int | None:
    count = as_count(value)
    return count if count else None


def as_number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def as_version(value: Any) -> str | None:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    return None


def as_mapping(value: Any) -> Mapping[Any, Any] | None:
    return value if isinstance(value, Mapping) else None


def as_str_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [str(v) for v in value]
    return None


def plain(value: Any) -> Any:
    """A YAML value as frozen plain Python: mappings stay mappings, lists become tuples."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(plain(v) for v in value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value
