"""Combining the hits of several RAG strategies (docker-agent's ``rrf``, ``weighted``, ``max``)
and dropping duplicates.

A chunk is known by its file and index. ``rrf`` scores it ``sum(1 / (k + rank))`` over the
strategies that found it (rank from 1); ``weighted`` sums each strategy's score times the
strategy's weight (a strategy without a weight is an error, as upstream); ``max`` keeps its
best score. Ties keep the order of first appearance (strategies in declaration order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from .._rag_config import RagFusion
from ._rag_index import Hit


class FusionError(Exception):
    """The fusion cannot run as configured (a weight is missing)."""


def fuse(results: Mapping[str, Sequence[Hit]], fusion: RagFusion | None) -> list[Hit]:
    """One ranked list from each strategy's hits (one strategy: its hits unchanged)."""
    if len(results) == 1:
        return list(next(iter(results.values())))
    how = fusion or RagFusion()
    scores: dict[tuple[str, int], float] = {}
    first: dict[tuple[str, int], Hit] = {}
    for name, hits in results.items():
        weight = 0.0
        if how.strategy == "weighted":
            if name not in how.weights:
                raise FusionError(f"missing weight for strategy: {name}")
            weight = how.weights[name]
        for rank, hit in enumerate(hits, start=1):
            key = hit.key
            first.setdefault(key, hit)
            if how.strategy == "rrf":
                scores[key] = scores.get(key, 0.0) + 1.0 / (how.k + rank)
            elif how.strategy == "weighted":
                scores[key] = scores.get(key, 0.0) + hit.score * weight
            else:
                scores[key] = max(scores.get(key, hit.score), hit.score)
    order = sorted(scores, key=lambda key: -scores[key])
    return [attrs.evolve(first[key], score=scores[key]) for key in order]


def deduplicate(hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` without repeats of a content already listed (the best-ranked one stays)."""
    seen: set[str] = set()
    out = []
    for hit in hits:
        if hit.content not in seen:
            seen.add(hit.content)
            out.append(hit)
    return out
