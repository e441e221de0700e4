"""The ``echo`` model: needs no key and no network; it answers with the user's own words.

It is what the ``auto`` model ref falls back to when no API key is configured, so a fresh
install can run a session end to end. The answer is ``Echo:`` followed by the first words of the
last user message, streamed word by word, with usage figures estimated from the text.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from greenroom.domain import ChatMessage, Usage

from ._base import ModelRequest, ModelResponse, OnDelta, TextDelta

MAX_WORDS = 12


class EchoProvider:
    """Streams ``Echo: <first words of the last user message>``.

    Attributes:
        token_delay: seconds to wait before each token (0: only a checkpoint), for demos.
    """

    def __init__(self, *, token_delay: float = 0.0) -> None:
        self.token_delay = token_delay

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
