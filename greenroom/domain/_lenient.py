"""Reading a body the way docker-agent's Go server does: unknown keys are ignored.

Go's ``encoding/json`` drops object keys a struct does not declare, at every depth, and
docker-agent's clients rely on it (its ``run --remote`` client posts a whole marshalled Go
session to create one). :func:`parse_lenient` removes the keys the target type does not
declare, then parses strictly: a declared field with a wrong value is still a 400 naming it.
"""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar

import attrs

from ._json import WIRE_HIDDEN, WIRE_RENAMES, parse

T = TypeVar("T")


def parse_lenient(value: object, cls: type[T] | Any, *, root: str = "$") -> T:
    """:func:`parse` after dropping the object keys ``cls`` does not declare."""
    parsed: T = parse(known_keys_only(value, cls), cls, root=root)
    return parsed


def known_keys_only(value: Any, tp: Any) -> Any:
    """``value`` without the object keys ``tp`` does not declare, all the way down. Values of
    declared keys are kept as they are: structuring still checks them."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return known_keys_only(value, args[0])
    if isinstance(tp, type) and attrs.has(tp):
        if not isinstance(value, dict):
            return value
        hints = typing.get_type_hints(tp)
        renames = WIRE_RENAMES.get(tp, {})
        hidden = WIRE_HIDDEN.get(tp, frozenset())
        wire = {
            renames.get(f.name, f.name): f.name for f in attrs.fields(tp) if f.name not in hidden
        }
        return {k: known_keys_only(v, hints[wire[k]]) for k, v in value.items() if k in wire}
    if origin in (tuple, list) and args and isinstance(value, list):
        return [known_keys_only(v, args[0]) for v in value]
    if origin in (typing.Union, types.UnionType):
        candidates = [a for a in args if a is not type(None)]
        if len(candidates) == 1:  # Optional[X]; other unions (history items) are kept as sent
            return known_keys_only(value, candidates[0])
    if origin in (dict, typing.Mapping) and len(args) == 2 and isinstance(value, dict):
        return {k: known_keys_only(v, args[1]) for k, v in value.items()}
    return value
