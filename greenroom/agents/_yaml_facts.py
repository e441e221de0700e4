"""The ``limit`` and ``cost`` keys of a ``models`` entry: facts that override models.dev's.

Shaped as models.dev (and docker-agent's ``pkg/modelsdev`` types) shape them::

    models:
      local:
        provider: openai
        model: my-model
        limit: {context: 32768, output: 4096}        # tokens
        cost: {input: 0.5, output: 1.5, cache_read: 0.05, cache_write: 0.6}  # USD / 1M tokens
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._yaml_checks import Checker, as_mapping, as_number, as_positive, join, kind_of, line_of
from .providers._facts import ModelFacts

FACT_KEYS = {"limit", "cost"}
_LIMIT_KEYS = {"context": "context", "output": "output"}
_COST_KEYS = {
    "input": "input_price",
    "output": "output_price",
    "cache_read": "cache_read_price",
    "cache_write": "cache_write_price",
}


def _price(value: Any) -> float | None:
    number = as_number(value)
    return number if number is not None and number >= 0 else None


def parse_facts(c: Checker, mapping: Mapping[Any, Any], path: str, line: int) -> ModelFacts | None:
    """The overrides a ``models`` entry gives (None when it gives none or they are bad)."""
    values: dict[str, Any] = {}
    ok = True
    for key, names, check, expected in (
        ("limit", _LIMIT_KEYS, as_positive, "a positive integer"),
        ("cost", _COST_KEYS, _price, "a non-negative number (USD per million tokens)"),
    ):
        if key not in mapping:
            continue
        sub_path = join(path, key)
        section = as_mapping(mapping[key])
        if section is None:
            c.fail(
                line_of(mapping, key) or line,
                sub_path,
                f"expected a mapping, got {kind_of(mapping[key])}",
            )
            ok = False
            continue
        c.keys(section, set(names), set(), sub_path)
        for name, field in names.items():
            if name in section:
                value = c.typed(section, name, sub_path, check, expected)
                ok = ok and value is not None
                values[field] = value
    if not ok or not values:
        return None
    return ModelFacts(**values)
