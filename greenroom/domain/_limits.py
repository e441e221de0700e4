"""What a value must satisfy before it may reach an actor or a store.

Two kinds of rule live here:

- **Every JSON value** a client sends (REST bodies, WebSocket frames, query parameters) must be
  storable as it is: strings are sequences of Unicode scalar values (no lone surrogates such as
  the JSON escape ``"\\ud800"``, which no UTF-8 encoder accepts), integers fit a signed 64-bit
  column, numbers are finite. :func:`check_value` walks a decoded JSON value and raises
  :class:`InvalidRequest` naming the first bad path.
- **Per field** rules are written into the types with ``typing.Annotated``: :class:`Range` for
  numbers and :class:`Length` for strings and arrays. The strict converter checks them (so the
  error names the field) and the OpenAPI generator turns them into ``minimum`` / ``maxLength``
  / ``minItems``, so the document and the server cannot disagree.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

import attrs

from greenroom.errors import InvalidRequest

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


@attrs.frozen
class Range:
    """Inclusive bounds of a number."""

    minimum: int | float | None = None
    maximum: int | float | None = None

    def check(self, value: float) -> None:
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be at least {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be at most {self.maximum}, got {value}")


@attrs.frozen
class Length:
    """Bounds on the length of a string (in characters) or of an array (in items)."""

    maximum: int
    minimum: int = 0

    def check(self, value: str | tuple[Any, ...]) -> None:
        unit = "characters" if isinstance(value, str) else "items"
        if len(value) > self.maximum:
            raise ValueError(f"at most {self.maximum} {unit} allowed, got {len(value)}")
        if len(value) < self.minimum:
            if self.minimum == 1:
                raise ValueError(f"at least one {unit[:-1]} required")
            raise ValueError(f"at least {self.minimum} {unit} required, got {len(value)}")


@attrs.frozen
class Pattern:
    """A regular expression a string must contain a match of (JSON Schema's ``pattern``, which
    is searched, not anchored); ``meaning`` is the error text when it does not."""

    regex: str
    meaning: str

    def check(self, value: str) -> None:
        if not re.search(self.regex, value):
            raise ValueError(self.meaning)


RULES = (Range, Length, Pattern)

# Documented limits (docs/security.md). Bodies as a whole are capped at 1 MiB besides.
MAX_NAME = 256  # model refs, agent names, tool names, ids
MAX_TITLE = 1024
MAX_PATH = 4096

Count = Annotated[int, Range(0, INT64_MAX)]
"""A non-negative integer that fits the store (token counts, indexes, limits)."""

Amount = Annotated[float, Range(0.0)]
"""A non-negative, finite number (cost)."""

MAX_TOKEN_COUNT = 2**53 - 1  # exact in every JSON reader; turns can add 2^63 - 2^53 more
MAX_COST = 1e15
TokenCount = Annotated[int, Range(0, MAX_TOKEN_COUNT)]
"""A token counter a client may set (``PATCH /tokens``): far from the 64-bit limit."""
CostAmount = Annotated[float, Range(0.0, MAX_COST)]
"""A cost a client may set."""


def add_count(total: int, more: int) -> int:
    """``total + more`` held within the store's 64 bits (a counter never overflows)."""
    return max(0, min(INT64_MAX, total + more))


def add_cost(total: float, more: float) -> float:
    """``total + more`` held finite and within :data:`MAX_COST`."""
    summed = total + more
    if summed != summed:  # NaN: the addition is dropped
        return total
    return min(MAX_COST, max(0.0, summed))


Name = Annotated[str, Length(MAX_NAME)]
Title = Annotated[str, Length(MAX_TITLE)]
PathText = Annotated[str, Length(MAX_PATH)]
NonBlank = Annotated[str, Pattern(r"\S", "must not be blank")]
PlainName = Annotated[
    str, Length(MAX_NAME), Pattern(r"^[^\x00-\x1f\x7f]*$", "control characters are not allowed")
]


def check_text(value: str, path: str) -> str:
    """``value`` if it is a sequence of Unicode scalar values, else InvalidRequest at ``path``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(
            f"{path}: invalid string: lone surrogate U+{ord(value[exc.start]):04X} at "
            f"character {exc.start} (strings must be valid Unicode)",
            path=path,
        ) from None
    return value


def check_value(value: Any, path: str = "$") -> None:
    """Raise InvalidRequest at the first string, integer or number in ``value`` (a decoded JSON
    value) that no store could keep: see the module docstring."""
    match value:
        case str():
            check_text(value, path)
        case bool() | None:
            pass
        case int():
            if not INT64_MIN <= value <= INT64_MAX:
                raise InvalidRequest(
                    f"{path}: integer out of range (must fit 64 bits: {INT64_MIN}..{INT64_MAX})",
                    path=path,
                )
        case float():
            if not math.isfinite(value):
                raise InvalidRequest(f"{path}: number is not finite", path=path)
        case dict():
            for key, entry in value.items():
                check_text(key, f"{path} (a key)")
                check_value(entry, f"{path}.{key}")
        case list():
            for index, entry in enumerate(value):
                check_value(entry, f"{path}[{index}]")
