"""Session titles: one short line asked of a model from the first turn's user messages.

Models are tried in order (the agent's ``title_model`` first when it has one, then its own
model); the first usable title wins. When every model fails or answers nothing usable, the
last error is raised: the caller logs it and leaves the title empty. The time budget is the
caller's (the session actor wraps the call in ``trio.move_on_after``).

A provider that writes titles itself (:class:`WritesTitles`, such as the echo model) is asked
directly instead of being prompted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from greenroom.domain import ChatMessage, Usage
from greenroom.errors import ModelError
from greenroom.observe import ModelCall, model_call, model_call_span, record_model_response

from ._runtime import PricedTitle
from .providers._base import Delta, ModelConfig, ModelRequest, Provider
from .providers._dmr import DmrProvider
from .providers._facts import facts_for

log = logging.getLogger(__name__)

MAX_TITLE_CHARS = 50
TITLE_MAX_TOKENS = 20

_SYSTEM = (
    "You write short, descriptive titles for conversations. "
    "Answer with the title only, on a single line."
)
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb"


def title_prompt(user_messages: Sequence[str]) -> tuple[ChatMessage, ...]:
    numbered = "\n".join(f"{i}. {text.strip()}" for i, text in enumerate(user_messages, 1))
    user = (
        "Write a title for a conversation that starts with these user messages:\n\n"
        f"{numbered}\n\n"
        f"The title must be a single line of at most {MAX_TITLE_CHARS} characters. "
        "Return ONLY the title, without quotes or any other text."
    )
    return (ChatMessage(role="system", content=_SYSTEM), ChatMessage(role="user", content=user))


def sanitize_title(raw: str) -> str:
    """The first non-blank line, trimmed, without surrounding quotes, cut to 50 characters."""
    for line in raw.replace("\r", "").split("\n"):
        title = line.strip().strip(_QUOTES).strip()
        if title:
            return title[:MAX_TITLE_CHARS].rstrip()
    return ""


async def _ignore(_: Delta) -> None:
    pass


@runtime_checkable
class WritesTitles(Protocol):
    """A provider that makes a title without being prompted for one."""

    async def title(self, user_messages: list[str]) -> str: ...


@attrs.frozen
class ModelTitleGenerator:
    """A :class:`~greenroom.agents.TitleGenerator` asking the models ``models()`` lists in turn.

    ``models`` is called at each ``generate``, so a model switched to after the runtime was
    built (a run's model override) is the one asked.
    """

    models: Callable[[], Sequence[ModelConfig]]
    provider_for: Callable[[ModelConfig], Provider]

    async def generate(self, user_messages: list[str]) -> str:
        """A title for a conversation starting with ``user_messages``.

        Raises:
            ModelError: no model produced a usable title (also for no non-empty message).
        """
        return (await self.generate_priced(user_messages)).title

    async def generate_priced(self, user_messages: list[str]) -> PricedTitle:
        """:meth:`generate`, with the tokens and cost of every model call it made."""
        texts = [m for m in user_messages if m.strip()]
        if not texts:
            raise ModelError("no user message to make a title from")
        last: Exception = ModelError("the title model returned no usable title")
        spent = PricedTitle("", cost=0.0)
        for model in self.models():
            request = ModelRequest(
                model=attrs.evolve(model, max_tokens=TITLE_MAX_TOKENS),
                messages=title_prompt(texts),
                max_tokens=TITLE_MAX_TOKENS,
                thinking=False,  # as docker-agent: a title is no place for reasoning
            )
            try:
                provider = self.provider_for(model)
                if isinstance(provider, DmrProvider):
                    provider = provider.inner  # as upstream: a title never reconfigures the runner
                if isinstance(provider, WritesTitles):
                    raw = await provider.title(texts)
                else:
                    with (
                        model_call(model.provider, model.model) as call,  # counted (metrics)
                        model_call_span(model.provider, model.model, purpose="title") as traced,
                    ):
                        response = await provider.complete(request, _ignore)
                        record_model_response(traced, response)
                    raw = response.content
                    spent = _spend(spent, response.answered_by or model, response.usage, call)
            except Exception as exc:
                log.debug("title model %s failed: %s", model.ref, exc)
                last = exc
                continue
            title = sanitize_title(raw)
            if title:
                return attrs.evolve(spent, title=title)
            last = ModelError(f"the title model {model.ref} returned no usable title")
        raise last


def _spend(spent: PricedTitle, model: ModelConfig, usage: Usage, call: ModelCall) -> PricedTitle:
    cost = facts_for(model.provider, model.model, model.facts).cost(usage)
    call.usage(usage.input_tokens, usage.output_tokens, cost or 0.0)
    return PricedTitle(
        "",
        spent.input_tokens + usage.input_tokens,
        spent.output_tokens + usage.output_tokens,
        None if cost is None or spent.cost is None else spent.cost + cost,
    )
