"""The ``echo`` model: needs no key and no network; it answers with the user's own words.

It is what the ``auto`` model ref falls back to when no API key is configured, so a fresh
install can run a session end to end. The answer is ``Echo:`` followed by the first words of the
last user message, streamed word by word, with usage figures estimated from the text.

To try steering, follow-ups and cancellation by hand, slow it down with the model option
``token_delay`` (seconds before each token)::

    models:
      slow:
        provider: echo
        model: echo
        provider_opts: {token_delay: 0.5}

It also writes session titles without a prompt: :meth:`EchoProvider.title` makes one from the
first user message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import trio

from greenroom.domain import ChatMessage, Usage
from greenroom.errors import InvalidRequest

from ._base import ModelRequest, ModelResponse, OnDelta, TextDelta

MAX_WORDS = 12
MAX_TOKEN_DELAY = 60.0
TITLE_WORDS = 6


class EchoProvider:
    """Streams ``Echo: <first words of the last user message>``.

    Attributes:
        token_delay: seconds to wait before each token (0: only a checkpoint), for demos.
    """

    def __init__(self, *, token_delay: float = 0.0) -> None:
        self.token_delay = token_delay

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> EchoProvider:
        """An echo model configured by a model's ``provider_opts`` (``token_delay``).

        Raises:
            InvalidRequest: an unknown option, or a delay that is not 0 to 60 seconds.
        """
        unknown = sorted(set(options) - {"token_delay"})
        if unknown:
            raise InvalidRequest(
                f"echo model: unknown provider_opts {unknown} (it takes token_delay)",
                path="provider_opts",
            )
        delay = options.get("token_delay", 0.0)
        if (
            not isinstance(delay, int | float)
            or isinstance(delay, bool)
            or not 0 <= delay <= MAX_TOKEN_DELAY
        ):
            raise InvalidRequest(
                f"echo model: token_delay must be a number of seconds from 0 to "
                f"{MAX_TOKEN_DELAY:g}, got {delay!r}",
                path="provider_opts.token_delay",
            )
        return cls(token_delay=float(delay))

    async def title(self, user_messages: list[str]) -> str:
        """A title made of the first words of the first user message (no model call)."""
        await trio.lowlevel.checkpoint()
        return echo_title(user_messages[0] if user_messages else "")

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        tokens = echo_tokens(last_user_text(request.messages))
        for token in tokens:
            await trio.sleep(self.token_delay)
            await on_delta(TextDelta(token))
        usage = Usage(input_tokens=estimate_tokens(request.messages), output_tokens=len(tokens))
        return ModelResponse(
            content="".join(tokens), usage=usage, model=request.model.model or "echo"
        )


def echo_tokens(text: str) -> list[str]:
    """The answer to ``text``, one token per word (a word after the first keeps its space)."""
    words = text.split()
    if not words:
        return ["Echo:", " (nothing", " to", " echo)"]
    tokens = ["Echo:", *(f" {word}" for word in words[:MAX_WORDS])]
    if len(words) > MAX_WORDS:
        tokens.append(" …")
    return tokens


def echo_title(text: str) -> str:
    """The first few words of ``text``, capitalised, ``…`` when cut (``""`` for none)."""
    words = text.split()
    if not words:
        return ""
    title = " ".join(words[:TITLE_WORDS])
    if len(words) > TITLE_WORDS:
        title += " …"
    return title[:1].upper() + title[1:]


def last_user_text(messages: Iterable[ChatMessage]) -> str:
    text = ""
    for message in messages:
        if message.role == "user":
            parts = [part.text for part in message.multi_content if part.type == "text"]
            text = message.content or " ".join(parts)
    return text


def estimate_tokens(messages: Iterable[ChatMessage]) -> int:
    """A rough prompt size: four characters a token plus a few tokens per message."""
    total = 0
    for message in messages:
        chars = len(message.content) + sum(len(part.text) for part in message.multi_content)
        total += 4 + (chars + 3) // 4
    return total
