"""An agent's ``structured_output``: its name, description, JSON schema and ``strict``.

The schema must itself be a valid JSON schema (checked with ``jsonschema`` against the schema's
own draft, 2020-12 when it names none); a bad one is an error at the schema's line.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from ._yaml_checks import Checker, as_bool, as_mapping, as_str, join, kind_of, line_of, plain
from .providers._base import StructuredOutput

_KEYS = {"name", "description", "schema", "strict"}


def parse_structured_output(c: Checker, raw: Any, line: int, path: str) -> StructuredOutput | None:
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
        return None
    c.keys(mapping, _KEYS, set(), path)
    ok = True
    for key in ("name", "schema"):
        if key not in mapping:
            c.fail(line, join(path, key), "is required")
            ok = False
    name = c.typed(mapping, "name", path, as_str, "a string") if "name" in mapping else ""
    description = (
        c.typed(mapping, "description", path, as_str, "a string")
        if "description" in mapping
        else ""
    )
    strict = (
        c.typed(mapping, "strict", path, as_bool, "true or false") if "strict" in mapping else False
    )
    schema = (
        c.typed(mapping, "schema", path, as_mapping, "a mapping") if "schema" in mapping else {}
    )
    if name is not None and "name" in mapping and not name.strip():
        c.fail(line_of(mapping, "name") or line, join(path, "name"), "must not be empty")
        ok = False
    if schema and not _schema_ok(c, plain(schema), line_of(mapping, "schema") or line, path):
        ok = False
    if not ok or name is None or description is None or strict is None or schema is None:
        return None
    return StructuredOutput(
        name=name, schema=plain(schema), description=description, strict=bool(strict)
    )


def _schema_ok(c: Checker, schema: Any, line: int, path: str) -> bool:
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(_thawed(schema))
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        at = f" at {where}" if where else ""
        c.fail(line, join(path, "schema"), f"is not a valid JSON schema{at}: {exc.message}")
        return False
    return True


def _thawed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_thawed(v) for v in value]
    return value
