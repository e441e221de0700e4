"""Frozen types of an agent file's ``rag`` sources (docker-agent's keys, checked in
``_yaml_rag.py``; run by ``tools/_rag.py``).

A source is resolved when the file is read: its document paths are absolute (relative ones
start at the agent file's directory) and its models are full model configs, so the toolset
needs nothing else from the file.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import attrs

from .providers._base import ModelConfig

STRATEGY_TYPES = ("chunked-embeddings", "semantic-embeddings", "bm25")
FUSION_STRATEGIES = ("rrf", "weighted", "max")
SIMILARITY_METRICS = ("cosine_similarity",)

DEFAULT_SEMANTIC_PROMPT = (
    "Summarize what the following part of ${basename} is about, for a search index, "
    "in 2 to 4 sentences. Name the exact terms, functions and types it mentions.\n"
    "${ast_context}\n\n${content}"
)


def _frozen(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value or {}))


@attrs.frozen
class RagChunking:
    """How documents are cut: ``size`` characters, ``overlap`` shared with the next chunk."""

    size: int = 1000
    overlap: int = 75
    respect_word_boundaries: bool = True
    code_aware: bool = False


@attrs.frozen
class RagStrategy:
    """One ``strategies`` entry; ``name`` is its ``type`` (the key fusion ``weights`` use)."""

    type: str
    docs: tuple[str, ...] = ()
    """Every document path of the strategy: the source's shared ones, then its own."""
    database: str = ""
    respect_vcs: bool | None = None
    """Overrides the source's ``respect_vcs`` for this strategy (None: the source's)."""
    chunking: RagChunking = RagChunking()
    limit: int = 5
    threshold: float = 0.0
    k1: float = 1.5
    b: float = 0.75
    embedding_model: ModelConfig | None = None
    vector_dimensions: int = 0
    similarity_metric: str = "cosine_similarity"
    batch_size: int = 50
    max_embedding_concurrency: int = 3
    max_indexing_concurrency: int = 3
    chat_model: ModelConfig | None = None
    semantic_prompt: str = DEFAULT_SEMANTIC_PROMPT
    ast_context: bool = False

    @property
    def name(self) -> str:
        return self.type


@attrs.frozen
class RagFusion:
    strategy: str = "rrf"
    k: int = 60
    weights: Mapping[str, float] = attrs.field(factory=_frozen, converter=_frozen)


@attrs.frozen
class RagReranking:
    """A chat model scores each result 0..1; results under ``threshold`` are dropped."""

    model: ModelConfig
    top_k: int = 0
    threshold: float = 0.5
    criteria: str = ""


@attrs.frozen
class RagResults:
    limit: int = 15
    fusion: RagFusion | None = None
    reranking: RagReranking | None = None
    deduplicate: bool = True
    include_score: bool = False
    return_full_content: bool = False


@attrs.frozen
class RagTool:
    name: str = ""
    description: str = ""
    instruction: str = ""


@attrs.frozen
class RagSource:
    """One entry of the top-level ``rag`` map, as an agent listing it gets it."""

    name: str
    agent_file: str
    strategies: tuple[RagStrategy, ...]
    tool: RagTool = RagTool()
    docs: tuple[str, ...] = ()
    respect_vcs: bool = True
    results: RagResults = RagResults()

    @property
    def tool_name(self) -> str:
        return self.tool.name or self.name
