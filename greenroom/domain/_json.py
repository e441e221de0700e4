"""The strict JSON converter: domain values to and from JSON-ready Python objects.

Strict means no silent coercion: ``1`` is not a string, ``"false"`` is not a bool, ``1.9`` is not
an int, and unknown keys are rejected. Every failure becomes one :class:`InvalidRequest` whose
message and ``path`` name the first bad field the way clients write it: ``$.messages[0].role``.
"""

from __future__ import annotations

import collections.abc
import datetime as dt
import math
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from greenroom.errors import InvalidRequest

from ._encode import encode_json as encode_json
from ._events import TAGGED_EVENTS, Event, MessageUsage, RawEvent, event_type
from ._limits import INT64_MAX, INT64_MIN, RULES
from ._types import (
    ROLES,
    Approval,
    ChatMessage,
    ErrorItem,
    FunctionCall,
    ImageURL,
    Item,
    Message,
    MessagePart,
    Permissions,
    Role,
    Session,
    SessionSummary,
    SubSession,
    Summary,
    ToolCall,
    Usage,
)

T = TypeVar("T")

__all__ = [
    "WIRE_HIDDEN",
    "WIRE_RENAMES",
    "converter",
    "encode_event",
    "encode_json",
    "event_from_json",
    "event_to_json",
    "format_datetime",
    "item_from_json",
    "item_to_json",
    "parse",
    "parse_datetime",
    "to_json",
]


def _type_name(value: object) -> str:
    """The JSON name of a decoded value's type, as clients know them."""
    return {
        dict: "object",
        list: "array",
        type(None): "null",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
    }.get(type(value), type(value).__name__)


def _strict_str(value: object, _: type) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"expected string, got {_type_name(value)}")


def _strict_int(value: object, _: type) -> int:
    # JSON has one number type: 3.0 is the integer 3 (as JSON Schema's "integer" says); 3.5
    # and "3" are not integers.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError("integer out of range (must fit 64 bits)")
        return value
    raise TypeError(f"expected integer, got {_type_name(value)}")


def _strict_float(value: object, _: type) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError("number is not finite")
        return number
    raise TypeError(f"expected number, got {_type_name(value)}")


def _strict_bool(value: object, _: type) -> bool:
    if isinstance(value, bool):
        return value
    raise TypeError(f"expected boolean, got {_type_name(value)}")


def parse_datetime(value: object, _: object = None) -> dt.datetime:
    """An RFC 3339 timestamp with an explicit offset ("Z" or "+hh:mm")."""
    if not isinstance(value, str):
        raise TypeError(f"expected RFC 3339 string, got {_type_name(value)}")
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"invalid RFC 3339 timestamp {value!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no UTC offset")
    return parsed


def format_datetime(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _wrap_note(exc: Exception, key: str, cls: type) -> ClassValidationError:
    """Re-raise ``exc`` as if it came from attribute ``key`` of ``cls`` (keeps error paths)."""
    exc.add_note(AttributeValidationNote(f"Structuring {cls.__name__} @ {key}", key, cls))
    return ClassValidationError(f"While structuring {cls.__name__}", [exc], cls)


def _renaming_paths(
    fn: Callable[[Any, Any], T], renames: dict[str, str]
) -> Callable[[Any, Any], T]:
    """Make errors of renamed attributes report the wire key, not the Python name."""

    def structure(value: Any, cls: Any) -> T:
        try:
            return fn(value, cls)
        except ClassValidationError as group:
            for exc in group.exceptions:
                notes = getattr(exc, "__notes__", [])
                for i, note in enumerate(notes):
                    if isinstance(note, AttributeValidationNote) and note.name in renames:
                        key = renames[note.name]
                        notes[i] = AttributeValidationNote(
                            note.replace(note.name, key), key, note.type
                        )
            raise

    return structure


converter = make_converter(forbid_extra_keys=True)
converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(int, _strict_int)
converter.register_structure_hook(float, _strict_float)
converter.register_structure_hook(bool, _strict_bool)
converter.register_structure_hook(dt.datetime, parse_datetime)
converter.register_unstructure_hook(dt.datetime, format_datetime)
converter.register_structure_hook(Any, lambda value, _: value)


def _role(value: object, _: object) -> str:
    role = _strict_str(value, str)
    if role not in ROLES:
        raise ValueError(f"expected one of {', '.join(ROLES)}, got {role!r}")
    return role


converter.register_structure_hook_func(lambda t: t == Role, _role)


def _objects_only(fn: Callable[[Any, Any], T]) -> Callable[[Any, Any], T]:
    """An attrs class is a JSON object: anything else fails with the JSON type's name."""

    def structure(value: Any, cls: Any) -> T:
        if not isinstance(value, dict):
            raise TypeError(f"expected object, got {_type_name(value)}")
        return fn(value, cls)

    return structure


def _attrs_hook(cls: type[Any]) -> Callable[[Any, Any], Any]:
    return _objects_only(make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True))


converter.register_structure_hook_factory(attrs.has, _attrs_hook)


def _empty_default(field: attrs.Attribute[Any]) -> bool:
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return False
    return default is None or default in ("", (), 0)


def _register(cls: type[Any], *, omit_empty: bool, **overrides: Any) -> None:
    """Generate strict hooks for ``cls``; with ``omit_empty`` fields left at an empty default
    ("", None, (), False, 0) are left out of the JSON, as upstream's ``omitempty`` does."""
    structure: Callable[[Any, Any], Any] = _objects_only(
        make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **overrides)
    )
    renames = {name: o.rename for name, o in overrides.items() if o.rename}
    if renames:
        structure = _renaming_paths(structure, renames)
    converter.register_structure_hook(cls, structure)
    unstructure_overrides = dict(overrides)
    if omit_empty:
        for field in attrs.fields(cls):
            if field.name not in unstructure_overrides and _empty_default(field):
                unstructure_overrides[field.name] = override(omit_if_default=True)
    converter.register_unstructure_hook(
        cls, make_dict_unstructure_fn(cls, converter, **unstructure_overrides)
    )


def _sequence_hook(seq_type: Any) -> Callable[[Any, Any], Any]:
    """Arrays only (a string is not a list of characters); element errors keep their index."""
    args = getattr(seq_type, "__args__", (Any,))
    element = args[0]
    handler = converter.get_structure_hook(element)

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"expected array, got {_type_name(value)}")
        out, errors = [], []
        for index, entry in enumerate(value):
            try:
                out.append(handler(entry, element))
            except Exception as exc:  # collected and re-raised with its index
                exc.add_note(IterableValidationNote(f"@ index {index}", index, element))
                errors.append(exc)
        if errors:
            raise IterableValidationError("While structuring an array", errors, seq_type)
        return tuple(out)

    return structure


def _mapping_hook(map_type: Any) -> Callable[[Any, Any], Any]:
    """Objects of string values only; a bad value's path names its key."""
    value_type = getattr(map_type, "__args__", (str, Any))[1]
    handler = converter.get_structure_hook(value_type)

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected object, got {_type_name(value)}")
        out, errors = {}, []
        for key, entry in value.items():
            try:
                out[key] = handler(entry, value_type)
            except Exception as exc:  # collected and re-raised with its key
                exc.add_note(AttributeValidationNote(f"@ key {key}", key, value_type))
                errors.append(exc)
        if errors:
            raise ClassValidationError("While structuring an object", errors, dict)
        return out

    return structure


def _is_tuple_of(t: Any) -> bool:
    return (
        typing.get_origin(t) is tuple
        and len(typing.get_args(t)) == 2
        and (typing.get_args(t)[1] is Ellipsis)
    )


def _is_list(t: Any) -> bool:
    return typing.get_origin(t) is list


def _is_mapping(t: Any) -> bool:
    return typing.get_origin(t) in (dict, collections.abc.Mapping)


def _is_annotated(t: Any) -> bool:
    return typing.get_origin(t) is typing.Annotated


def _annotated_hook(annotated: Any) -> Callable[[Any, Any], Any]:
    """Structure the base type, then check its rules (``_limits.RULES``)."""
    base, *metadata = typing.get_args(annotated)
    handler = converter.get_structure_hook(base)
    rules = [m for m in metadata if isinstance(m, RULES)]

    def structure(value: Any, _: Any) -> Any:
        result = handler(value, base)
        for rule in rules:
            rule.check(result)
        return result

    return structure


converter.register_structure_hook_factory(_is_annotated, _annotated_hook)


def _is_literal(t: Any) -> bool:
    return typing.get_origin(t) is typing.Literal


def _literal_hook(literal: Any) -> Callable[[Any, Any], Any]:
    """One of the listed values, compared strictly; the error lists them as clients write them."""
    allowed = typing.get_args(literal)
    strings = all(isinstance(a, str) for a in allowed)

    def structure(value: Any, _: Any) -> Any:
        if strings and not isinstance(value, str):
            raise TypeError(f"expected string, got {_type_name(value)}")
        for option in allowed:
            if type(value) is type(option) and value == option:
                return option
        shown = ", ".join(repr(a) if a == "" else str(a) for a in allowed)
        raise ValueError(f"expected one of {shown}; got {value!r}")

    return structure


converter.register_structure_hook_factory(_is_literal, _literal_hook)
converter.register_structure_hook_factory(_is_tuple_of, _sequence_hook)
converter.register_structure_hook_factory(_is_list, _sequence_hook)
converter.register_structure_hook_factory(_is_mapping, _mapping_hook)

# Leaves first: a class's generated hook captures the hooks of its fields when it is made.
for _cls in (
    ImageURL,
    MessagePart,
    FunctionCall,
    ToolCall,
    ChatMessage,
    Message,
    Summary,
    ErrorItem,
    Approval,
):
    _register(_cls, omit_empty=True)
_register(Usage, omit_empty=False)
_register(Permissions, omit_empty=False)
_register(SessionSummary, omit_empty=False)


# --- history items: {"message": ...} | {"sub_session": ...} | {"summary": ...} | {"error": ...}


def item_from_json(value: object, _: object = None) -> Item:
    if not isinstance(value, dict):
        raise TypeError(f"expected object, got {_type_name(value)}")
    kinds = [k for k in ("message", "sub_session", "summary", "error") if k in value]
    if len(kinds) != 1:
        raise ValueError("an item needs exactly one of message, sub_session, summary, error")
    kind = kinds[0]
    try:
        if kind == "message":
            _only_keys(value, {"message"})
            return converter.structure(value["message"], Message)
        if kind == "sub_session":
            _only_keys(value, {"sub_session"})
            return SubSession(converter.structure(value["sub_session"], Session))
        if kind == "error":
            _only_keys(value, {"error"})
            return converter.structure(value["error"], ErrorItem)
    except Exception as exc:
        raise _wrap_note(exc, kind, SubSession) from None
    return converter.structure(value, Summary)


def _only_keys(value: Mapping[str, object], allowed: set[str]) -> None:
    extra = sorted(set(value) - allowed)
    if extra:
        raise ValueError(f"unexpected keys next to the item's kind: {', '.join(extra)}")


def item_to_json(item: Item) -> dict[str, Any]:
    match item:
        case Message():
            return {"message": converter.unstructure(item, Message)}
        case SubSession(session=sub):
            return {"sub_session": converter.unstructure(sub, Session)}
        case ErrorItem():
            return {"error": converter.unstructure(item, ErrorItem)}
        case Summary():
            return converter.unstructure(item, Summary)  # type: ignore[no-any-return]
    raise TypeError(f"not a history item: {item!r}")


converter.register_structure_hook_func(lambda t: t == Item, item_from_json)
converter.register_unstructure_hook_func(lambda t: t == Item, item_to_json)
# Sessions always carry every field; ``items`` is "messages" on the wire, ``parent_id`` internal.
WIRE_RENAMES: dict[type[Any], dict[str, str]] = {Session: {"items": "messages"}}
"""Attributes whose JSON key differs from their Python name."""
WIRE_HIDDEN: dict[type[Any], frozenset[str]] = {Session: frozenset({"parent_id"})}
"""Attributes that never appear in JSON."""
_register(
    Session,
    omit_empty=False,
    **{name: override(rename=key) for name, key in WIRE_RENAMES[Session].items()},
    **{name: override(omit=True) for name in WIRE_HIDDEN[Session]},
)


# --- events ------------------------------------------------------------------------------


def event_from_json(value: object) -> Event:
    """Parse a runtime event. Unknown types, and known types this version cannot read, become
    :class:`RawEvent` so nothing a runtime says is lost."""
    if not isinstance(value, dict):
        raise InvalidRequest(f"expected event object, got {_type_name(value)}")
    tag = value.get("type")
    if not isinstance(tag, str):
        raise InvalidRequest("event has no string 'type'", path="$.type")
    cls = TAGGED_EVENTS.get(tag)
    if cls is not None:
        body = {k: v for k, v in value.items() if k != "type"}
        try:
            return converter.structure(body, cls)  # type: ignore[no-any-return]
        except Exception:
            pass
    return RawEvent(tag, dict(value))


def event_to_json(event: Event) -> dict[str, Any]:
    if isinstance(event, RawEvent):
        return dict(event.data)
    body: dict[str, Any] = {"type": event_type(event)}
    body.update(converter.unstructure(event, type(event)))
    return body


# docker-agent's MessageUsage: Cost and Model have no JSON tags in Go (so capitalised).
_register(
    MessageUsage,
    omit_empty=False,
    cost=override(rename="Cost"),
    model=override(rename="Model"),
)
for _cls in TAGGED_EVENTS.values():
    _register(_cls, omit_empty=True)


def encode_event(event: Event) -> bytes:
    """The event's JSON (:func:`encode_json`), without the log's timestamp."""
    return encode_json(event_to_json(event))


# --- the edge ---------------------------------------------------------------------------


def _format_leaf(exc: BaseException, _type: type | None) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown field(s): {', '.join(sorted(exc.extra_fields))}"
    return str(exc.args[0]) if exc.args else type(exc).__name__


def parse(value: object, cls: type[T] | Any, *, root: str = "$") -> T:
    """Structure ``value`` as ``cls`` or raise :class:`InvalidRequest` naming the first bad path."""
    try:
        return converter.structure(value, cls)  # type: ignore[no-any-return]
    except InvalidRequest:
        raise
    except Exception as exc:
        messages = cattrs.transform_error(exc, path=root, format_exception=_format_leaf)
        first = messages[0] if messages else f"invalid value @ {root}"
        text, _, path = first.rpartition(" @ ")
        raise InvalidRequest(f"{path}: {text}", path=path) from None


def to_json(value: object, cls: type[Any] | Any = None) -> Any:
    """Unstructure ``value`` (as ``cls`` when given) into JSON-ready Python objects."""
    return converter.unstructure(value, cls)
