"""What a model's ``thinking_budget`` asks of each API (docker-agent's mapping), pure.

``thinking_budget`` is an effort (``minimal``, ``low``, ``medium``, ``high``; ``none``
disables) or a number of tokens (``0`` disables; ``-1`` is Gemini's dynamic budget). The
session's thinking toggle, when off, clears it and Anthropic's ``interleaved_thinking``.
Unlike docker-agent, a model without ``thinking_budget`` gets no reasoning settings (docker-agent
fills in per-vendor defaults; see docs/decisions/0016-reasoning-and-structured-output.md).
"""

from __future__ import annotations

from typing import Any

from greenroom.errors import InvalidRequest

from ._base import ModelRequest

EFFORTS = ("minimal", "low", "medium", "high")
ANTHROPIC_MIN_BUDGET = 1024
"""Anthropic refuses smaller thinking budgets (docker-agent then drops thinking)."""
ANTHROPIC_OUTPUT_HEADROOM = 8192
"""Tokens added to the budget for max_tokens when max_tokens was not set (docker-agent's)."""
INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
INTERLEAVED_DEFAULT_BUDGET = 16384
"""Anthropic's thinking budget when ``interleaved_thinking`` is on and none is set
(docker-agent's)."""


def budget(request: ModelRequest) -> str | int | None:
    """The request's thinking budget: None when thinking is off or disabled by the model."""
    value = request.model.thinking_budget
    if not request.thinking or value is None or disabled(value):
        return None
    return value


def disabled(value: str | int) -> bool:
    """``0`` and ``none`` turn reasoning off."""
    if isinstance(value, str):
        return value.strip().lower() == "none"
    return value == 0


def interleaved(request: ModelRequest) -> bool:
    """``provider_opts.interleaved_thinking: true``, unless the session turned thinking off."""
    return request.thinking and request.model.provider_opts.get("interleaved_thinking") is True


def is_openai_reasoning_model(model: str) -> bool:
    """o1/o3/o4 and gpt-5 models take ``reasoning_effort`` (docker-agent's test)."""
    name = model.lower()
    return name.startswith(("o1", "o3", "o4", "gpt-5"))


def openai_effort(request: ModelRequest) -> str | None:
    """``reasoning_effort`` for an OpenAI request (None: not sent).

    Raises:
        InvalidRequest: a token budget (or an unknown effort) for a reasoning model.
    """
    value = budget(request)
    model = request.model
    if value is None or not is_openai_reasoning_model(model.model):
        return None
    effort = value.strip().lower() if isinstance(value, str) else ""
    if effort in EFFORTS:
        return effort
    raise InvalidRequest(
        f"model {model.name!r}: OpenAI takes thinking_budget minimal, low, medium or high, "
        f"not {value!r}",
        path=f"$.models.{model.name}.thinking_budget",
    )


def _claude_budget(request: ModelRequest) -> str | int | None:
    """The budget, with docker-agent's default for interleaved thinking on Anthropic's API."""
    value = budget(request)
    model = request.model
    bedrock = model.provider == "amazon-bedrock"
    if value is None and model.thinking_budget is None and interleaved(request) and not bedrock:
        return INTERLEAVED_DEFAULT_BUDGET
    return value


def anthropic_thinking(request: ModelRequest, max_tokens: int) -> int | None:
    """The ``budget_tokens`` for Anthropic (and Claude on Bedrock); None: no thinking.

    Only a token budget of at least 1024 below ``max_tokens`` enables it, as in docker-agent;
    on Anthropic's API ``interleaved_thinking`` without a budget means 16384 tokens.
    """
    value = _claude_budget(request)
    if not isinstance(value, int) or value < ANTHROPIC_MIN_BUDGET or value >= max_tokens:
        return None
    return value


def anthropic_max_tokens(request: ModelRequest, default: int) -> int:
    """max_tokens for Anthropic: the set value, else room for the thinking budget and output.

    Raises:
        InvalidRequest: a set max_tokens not above the thinking budget.
    """
    model = request.model
    value = _claude_budget(request)
    tokens = request.max_tokens or model.max_tokens
    if not isinstance(value, int) or value <= 0:
        return tokens or default
    if tokens is None:
        return max(default, value + ANTHROPIC_OUTPUT_HEADROOM)
    if tokens <= value:
        raise InvalidRequest(
            f"model {model.name!r}: max_tokens ({tokens}) must be greater than thinking_budget "
            f"({value}); set max_tokens to at least {value + 1024}",
            path=f"$.models.{model.name}.max_tokens",
        )
    return tokens


def gemini_thinking(request: ModelRequest) -> dict[str, Any] | None:
    """Gemini's ``thinkingConfig`` fields (None: none sent).

    Thinking off: ``thinkingBudget: 0`` (Gemini 3 cannot turn it off: ``thinkingLevel: low``).
    An effort on Gemini 3 is a ``thinkingLevel``; tokens are a ``thinkingBudget``.
    """
    model = request.model
    name = model.model.lower()
    gemini3 = name.startswith("gemini-3")
    value = model.thinking_budget
    if not request.thinking or (value is not None and disabled(value)):
        if gemini3:
            return {"include_thoughts": False, "thinking_level": "LOW"}
        return {"include_thoughts": False, "thinking_budget": 0}
    if value is None:
        return None
    if gemini3 and isinstance(value, str) and value.lower() in EFFORTS:
        return {"include_thoughts": True, "thinking_level": value.upper()}
    if isinstance(value, int):
        return {"include_thoughts": True, "thinking_budget": value}
    if gemini3:
        return {"include_thoughts": True, "thinking_level": "HIGH"}
    return {"include_thoughts": True}
