"""Reading request JSON safely and writing error bodies: the transport's edge."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from greenroom.domain import INT64_MAX, INT64_MIN, check_text, check_value, parse_lenient
from greenroom.errors import GreenroomError, InvalidRequest, OwnedElsewhere, PayloadTooLarge

from ._params import path_param

if TYPE_CHECKING:
    from ._ops import Operation

T = TypeVar("T")

MAX_BODY = 1024 * 1024
MAX_DEPTH = 64


def _check_depth(raw: str) -> None:
    # Deep nesting makes json.loads recurse until RecursionError; refuse it before parsing.
    depth = deepest = 0
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    raise InvalidRequest(f"JSON nested deeper than {MAX_DEPTH} levels")
        elif ch in "]}":
            depth -= 1


def load_json(data: bytes, *, limit: int = MAX_BODY, empty: Any = None, check: bool = True) -> Any:
    """Decode a JSON body: 413 over ``limit``; 400 for bad UTF-8, bad JSON, deep nesting, or
    (unless ``check`` is False: the caller checks) a value no store can keep
    (``domain.check_value``)."""
    if len(data) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes")
    if not data.strip():
        if empty is not None:
            return empty
        raise InvalidRequest("request body is empty; expected JSON")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"request body is not valid UTF-8 (byte {exc.start})") from None
    _check_depth(text)
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise InvalidRequest(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if check:
        check_value(value)  # storable: no lone surrogates, 64-bit integers, finite numbers
    return value


def _parse_int(literal: str) -> int | float:
    # An integer literal beyond 64 bits is read as the double it denotes (as JavaScript and
    # most JSON readers do): free-form values keep it, and an integer field refuses it by its
    # range, naming the field.
    value = int(literal)
    return value if INT64_MIN <= value <= INT64_MAX else float(value)


def _no_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity, which are not JSON.
    raise InvalidRequest(f"invalid JSON: {name} is not a JSON value")


def parse_body(
    data: bytes, cls: type[T], *, empty_ok: bool = False, array_field: str | None = None
) -> T:
    """A REST body as ``cls``, read as docker-agent reads it: unknown keys are ignored (a
    declared key with a wrong value is still a 400). With ``array_field``, a bare JSON array
    stands for ``{array_field: [...]}`` (the run body older clients send)."""
    value = load_json(data, empty={} if empty_ok else None)
    if isinstance(value, list) and array_field is not None:
        value = {array_field: value}
    if not isinstance(value, dict):
        expected = "a JSON object or array" if array_field else "a JSON object"
        raise InvalidRequest(f"$: expected {expected}")
    return parse_lenient(value, cls)


def check_params(
    op: Operation, params: Mapping[str, str], query: Mapping[str, str], headers: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check the path parameters and parse the operation's query and header parameters
    (``_params.py``); returns (query, headers) with typed values, keyed by name (headers by
    lower-case name). Other query keys and headers are left out."""
    check_path_params(params)
    parsed_query = {
        p.name: p.parse(check_text(query[p.name], f"query.{p.name}"), f"query.{p.name}")
        for p in op.query
        if p.name in query
    }
    parsed_headers = {
        p.name.lower(): p.parse(headers[p.name.lower()], f"header.{p.name}")
        for p in op.header_params
        if p.name.lower() in headers
    }
    return parsed_query, parsed_headers


def check_path_params(params: Mapping[str, str], prefix: str = "path.") -> None:
    for name, value in params.items():
        where = f"{prefix}{name}"
        path_param(name).parse(check_text(value, where), where)


def error_body(exc: GreenroomError, *, code: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": exc.message, "code": code or exc.code}
    if isinstance(exc, InvalidRequest):
        body["path"] = exc.path  # "$" when the body as a whole is wrong
    if isinstance(exc, OwnedElsewhere) and exc.owner:
        body["owner"] = exc.owner
    return body


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
