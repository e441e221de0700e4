"""JSON Schemas generated from the attrs types, for the OpenAPI document."""

from __future__ import annotations

import datetime as dt
import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs

from greenroom.domain import (
    EVENT_TAGS,
    INT64_MAX,
    INT64_MIN,
    WIRE_HIDDEN,
    WIRE_RENAMES,
    Length,
    Pattern,
    Range,
    Session,
)

JSON = dict[str, Any]
_PRIMITIVES: dict[Any, JSON] = {
    str: {"type": "string"},
    int: {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    dt.datetime: {"type": "string", "format": "date-time"},
    type(None): {"type": "null"},
    Any: {},
}


class SchemaBuilder:
    """Collects component schemas while turning Python types into JSON Schema."""

    def __init__(self) -> None:
        self.components: dict[str, JSON] = {}

    def ref(self, name: str, schema: JSON) -> JSON:
        self.components.setdefault(name, schema)
        return {"$ref": f"#/components/schemas/{name}"}

    def of(self, tp: Any) -> JSON:
        if tp in _PRIMITIVES:
            return dict(_PRIMITIVES[tp])
        if isinstance(tp, type) and attrs.has(tp):
            return self.attrs_class(tp)
        name = getattr(tp, "__name__", "")
        if name == "Item" or tp == _item_type():
            return self.ref("Item", self.item())
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return _with_rules(self.of(args[0]), args[1:])
        if origin is typing.Literal:
            kinds = {type(a) for a in args}
            schema: JSON = {"enum": list(args)}
            if kinds == {str}:
                schema = {"type": "string", **schema}
            return schema
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if origin in (tuple, list):
            return {"type": "array", "items": self.of(args[0]) if args else {}}
        if origin in (dict, Mapping) or tp in (dict, Mapping):
            value = args[1] if len(args) == 2 else Any
            return {"type": "object", "additionalProperties": self.of(value)}
        raise TypeError(f"no JSON schema for {tp!r}")

    def attrs_class(self, cls: type[Any]) -> JSON:
        if cls.__name__ in self.components:
            return {"$ref": f"#/components/schemas/{cls.__name__}"}
        self.components[cls.__name__] = {}  # placeholder: recursive types (Session)
        hints = typing.get_type_hints(cls, include_extras=True)
        renames = WIRE_RENAMES.get(cls, {})
        properties: JSON = {}
        required = []
        for field in attrs.fields(cls):
            if field.name in WIRE_HIDDEN.get(cls, ()):
                continue
            key = renames.get(field.name, field.name)
            properties[key] = self.of(hints[field.name])
            if field.default is attrs.NOTHING:
                required.append(key)
        schema: JSON = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        # No "additionalProperties": false: REST bodies are read as docker-agent's Go server
        # reads them, ignoring keys they do not declare (docs/decisions/0007).
        schema.update(getattr(cls, "json_schema_extra", {}))
        self.components[cls.__name__] = schema
        return {"$ref": f"#/components/schemas/{cls.__name__}"}

    def item(self) -> JSON:
        from greenroom.domain import ErrorItem, Message, Summary

        def one(key: str, schema: JSON) -> JSON:
            return {
                "type": "object",
                "properties": {key: schema},
                "required": [key],
                "additionalProperties": False,
            }

        return {
            "oneOf": [
                one("message", self.of(Message)),
                one("sub_session", self.of(Session)),
                self.of(Summary),
                one("error", self.of(ErrorItem)),
            ]
        }

    def events(self) -> JSON:
        """The event union: one schema per tagged event, plus any other ``type``."""
        if "Event" in self.components:
            return {"$ref": "#/components/schemas/Event"}
        variants = []
        mapping = {}
        for cls, tag in EVENT_TAGS.items():
            self.of(cls)
            body = self.components[cls.__name__]
            body["properties"] = {"type": {"const": tag}, **body.get("properties", {})}
            body["required"] = ["type", *body.get("required", [])]
            body["additionalProperties"] = True
            ref = f"#/components/schemas/{cls.__name__}"
            variants.append({"$ref": ref})
            mapping[tag] = ref
        other = {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"]}
        self.components["OtherEvent"] = other
        variants.append({"$ref": "#/components/schemas/OtherEvent"})
        return self.ref(
            "Event",
            {"anyOf": variants, "x-discriminator": {"propertyName": "type", "mapping": mapping}},
        )


def _with_rules(schema: JSON, rules: tuple[Any, ...]) -> JSON:
    """``schema`` narrowed by the domain's Range / Length / Pattern rules."""
    out = dict(schema)
    for rule in rules:
        if isinstance(rule, Range):
            if rule.minimum is not None:
                out["minimum"] = rule.minimum
            if rule.maximum is not None:
                out["maximum"] = rule.maximum
        elif isinstance(rule, Length):
            array = out.get("type") == "array"
            out["maxItems" if array else "maxLength"] = rule.maximum
            if rule.minimum:
                out["minItems" if array else "minLength"] = rule.minimum
        elif isinstance(rule, Pattern):
            out["pattern"] = rule.regex
    return out


def _item_type() -> Any:
    from greenroom.domain import Item

    return Item
