"""Checking a final answer against the agent's ``structured_output`` schema.

The model was asked for JSON matching the schema (each provider in its own way); whatever it
says is checked here, and an answer that is not JSON or does not match ends the turn with a
``structured_output_mismatch`` error rather than passing silently.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from greenroom.errors import StructuredOutputMismatch

from .providers._base import StructuredOutput, thaw

_MAX_DETAIL = 300


def check_answer(output: StructuredOutput, text: str) -> Any:
    """The answer's JSON value. Raises StructuredOutputMismatch when it does not match."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StructuredOutputMismatch(
            f"the answer is not JSON ({exc.msg} at {exc.pos}); structured output "
            f"{output.name!r} expects JSON matching its schema"
        ) from None
    schema = thaw(output.schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(cls(schema).iter_errors(value))
    if error is not None:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
        detail = error.message[:_MAX_DETAIL]
        raise StructuredOutputMismatch(
            f"the answer does not match structured output {output.name!r}: ${where}: {detail}"
        )
    return value
