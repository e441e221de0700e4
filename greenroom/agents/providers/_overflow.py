"""Recognising a provider's "the prompt is longer than the context window" refusal, in one place.

Each vendor words it its own way (the phrases below are from their error bodies); a refusal that
matches becomes :class:`~greenroom.errors.ModelContextOverflow`, which is never retried as is:
the runtime compacts the history and tries the turn once more.

- OpenAI (and compatible servers): ``context_length_exceeded``, "This model's maximum context
  length is 128000 tokens. However, your messages resulted in ... Please reduce the length of
  the messages."
- Anthropic: "prompt is too long: 210000 tokens > 200000 maximum".
- Gemini: "The input token count (1200000) exceeds the maximum number of tokens allowed
  (1048576)."
- Bedrock (Converse): "ValidationException: Input is too long for requested model." and, for
  Claude models, Anthropic's wording.
"""

from __future__ import annotations

import re

_PATTERNS = re.compile(
    "|".join(
        re.escape(phrase)
        for phrase in (
            "context_length_exceeded",
            "maximum context length",
            "context length exceeded",
            "reduce the length of the messages",
            "prompt is too long",
            "input is too long",
            "exceeds the maximum number of tokens",
            "maximum number of tokens allowed",
            "too many input tokens",
            "exceeds the model's max token",
            "exceeds the context window",
            "context window exceeds",
        )
    ),
    re.IGNORECASE,
)


def is_context_overflow(status: int, detail: str) -> bool:
    """Whether an HTTP error (``status``, the vendor's message) says the prompt is too long.

    Only refusals (4xx) count: a 5xx or a rate limit is something else even if its text
    happens to mention the context.
    """
    return 400 <= status < 500 and status != 429 and bool(_PATTERNS.search(detail))
