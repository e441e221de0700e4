"""Rule-based model routing: a model with ``routing`` picks a model per call by examples.

docker-agent makes a model with ``routing: [{model, examples}]`` a router: each call goes to
the rule whose example best matches the last user message, by full-text search (Bleve, English
analyzer, a match query, the top hit wins); with no match (or no user message) the call goes to
the router's own ``provider``/``model``. greenroom does the same with a small in-memory index:
the English analysis (words, possessive ``'s`` dropped, lower case, English stop words removed,
Porter stems from the ``snowballstemmer`` package) and TF-IDF scoring of each example against
the message's terms (the sum over shared terms of ``sqrt(tf) * idf² / sqrt(length)``, as
Lucene's classic similarity that Bleve's default follows); ties go to the earlier example.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import cache
from typing import Any

import attrs

from ._base import ModelConfig, ModelRequest, ModelResponse, OnDelta, Provider

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not now of off on once only or other
    ought our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves
    """.split()  # noqa: SIM905
)


@cache
def _stemmer() -> Any:
    import snowballstemmer  # type: ignore[import-untyped]

    return snowballstemmer.stemmer("porter")


def analyze(text: str) -> list[str]:
    """The terms of ``text`` (see the module docstring)."""
    words = []
    for match in _WORD.finditer(text):
        word = match.group().lower()
        if word.endswith(("'s", "\u2019s")):
            word = word[:-2]
        word = word.replace("'", "")
        if word and word not in STOP_WORDS:
            words.append(word)
    return list(_stemmer().stemWords(words))


@attrs.frozen
class ExampleIndex:
    """The examples of the rules, each tagged with its rule's position."""

    docs: tuple[tuple[int, Counter[str], int], ...]
    """(rule, term counts, number of terms) per example."""
    document_frequency: Counter[str]

    @classmethod
    def of(cls, rules: Sequence[Sequence[str]]) -> ExampleIndex:
        docs = []
        frequency: Counter[str] = Counter()
        for rule, examples in enumerate(rules):
            for example in examples:
                terms = Counter(analyze(example))
                if terms:
                    docs.append((rule, terms, sum(terms.values())))
                    frequency.update(terms.keys())
        return cls(tuple(docs), frequency)

    def best(self, text: str) -> int | None:
        """The rule of the best-matching example for ``text``; None when nothing matches."""
        query = set(analyze(text))
        if not query or not self.docs:
            return None
        total = len(self.docs)
        best_rule, best_score = None, 0.0
        for rule, terms, length in self.docs:
            score = 0.0
            for term in query & terms.keys():
                idf = 1.0 + math.log(total / (self.document_frequency[term] + 1))
                score += math.sqrt(terms[term]) * idf * idf / math.sqrt(length)
            if score > best_score:
                best_rule, best_score = rule, score
        return best_rule


def last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            parts = [p.text for p in message.multi_content if p.type == "text" and p.text]
            return message.content or " ".join(parts)
    return ""


class RoutingProvider:
    """Sends each call to the model of the best-matching rule, else to ``fallback``."""

    def __init__(
        self,
        routes: Sequence[tuple[ModelConfig, Provider]],
        examples: Sequence[Sequence[str]],
        fallback: tuple[ModelConfig, Provider],
    ) -> None:
        self.routes = list(routes)
        self.fallback = fallback
        self.index = ExampleIndex.of(examples)

    def choose(self, request: ModelRequest) -> tuple[ModelConfig, Provider]:
        rule = self.index.best(last_user_text(request))
        return self.fallback if rule is None else self.routes[rule]

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        model, provider = self.choose(request)
        # The chosen model's own output limit, not the router's (as upstream).
        routed = attrs.evolve(request, model=model, max_tokens=model.max_tokens)
        response = await provider.complete(routed, on_delta)
        return attrs.evolve(
            response, model=response.model or model.ref, answered_by=response.answered_by or model
        )
