"""How ``greenroom chat`` shows a turn's usage: tokens, cost (null: unknown) and context use."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from greenroom.chat._handlers import HANDLERS, context_use
from greenroom.client import Event


def test_context_use_is_shown_only_for_a_known_window() -> None:
    assert context_use(1710, 128000) == " | context 1% of 128000"
    assert context_use(2700, 3000) == " | context 90% of 3000"
    assert context_use(500, 0) == ""


def test_a_null_cost_counts_as_none_spent_and_the_context_is_kept() -> None:
    app: Any = SimpleNamespace(usage=(0, 0, 0.0), context=(0, 0))
    usage = {"input_tokens": 10, "output_tokens": 5, "context_length": 15, "context_limit": 0}
    HANDLERS["token_usage"](
        app, Event(1, {"type": "token_usage", "usage": {**usage, "cost": None}})
    )
    assert app.usage == (10, 5, 0.0)
    priced = {**usage, "cost": 0.0021, "context_limit": 128000}
    HANDLERS["token_usage"](app, Event(2, {"type": "token_usage", "usage": priced}))
    assert app.usage == (10, 5, 0.0021)
    assert app.context == (15, 128000)
