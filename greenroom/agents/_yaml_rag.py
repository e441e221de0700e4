"""The top-level ``rag`` map of an agent file and an agent's ``rag`` list (docker-agent's keys).

Each source has ``tool`` (``name``, ``description``, ``instruction``), shared ``docs``,
``respect_vcs``, ``strategies`` and ``results``. A strategy has a ``type`` (``bm25``,
``chunked-embeddings``, ``semantic-embeddings``), its own ``docs``, ``database``, ``chunking``,
``limit`` and its type's keys. Every fault is an error naming its key path, as for the rest of
the file; models are resolved here (a ``models`` entry or ``provider/model``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ._config import split_inline_ref
from ._rag_config import (
    DEFAULT_SEMANTIC_PROMPT,
    FUSION_STRATEGIES,
    SIMILARITY_METRICS,
    STRATEGY_TYPES,
    RagChunking,
    RagFusion,
    RagReranking,
    RagResults,
    RagSource,
    RagStrategy,
    RagTool,
)
from ._yaml_checks import (
    Checker,
    as_bool,
    as_count,
    as_mapping,
    as_number,
    as_positive,
    as_str,
    as_str_list,
    kind_of,
    line_of,
    own_line,
)
from ._yaml_models import ModelRefs
from .providers._base import ModelConfig
from .providers._catalog import CustomProvider, apply_custom_provider

_SOURCE_KEYS = {"tool", "docs", "respect_vcs", "strategies", "results"}
_TOOL_KEYS = {"name", "description", "instruction"}
_COMMON = {"type", "docs", "database", "chunking", "limit", "respect_vcs"}
_EMBEDDING = {
    "embedding_model",
    "vector_dimensions",
    "similarity_metric",
    "threshold",
    "batch_size",
    "embedding_batch_size",
    "max_embedding_concurrency",
    "max_indexing_concurrency",
}
_STRATEGY_KEYS = {
    "bm25": _COMMON | {"k1", "b", "threshold"},
    "chunked-embeddings": _COMMON | _EMBEDDING,
    "semantic-embeddings": _COMMON | _EMBEDDING | {"chat_model", "semantic_prompt", "ast_context"},
}
_CHUNKING_KEYS = {"size", "overlap", "respect_word_boundaries", "code_aware"}
_RESULTS_KEYS = {
    "limit",
    "fusion",
    "reranking",
    "deduplicate",
    "include_score",
    "return_full_content",
}
_FUSION_KEYS = {"strategy", "k", "weights"}
_RERANK_KEYS = {"model", "top_k", "threshold", "criteria"}


def _unit(value: Any) -> float | None:
    number = as_number(value)
    return number if number is not None and number >= 0 else None


class _Reader:
    """Reads typed keys of one mapping, reporting each fault under ``path``."""

    def __init__(self, c: Checker, mapping: Mapping[Any, Any], path: str, line: int) -> None:
        self.c, self.mapping, self.path, self.line = c, mapping, path, line

    def get(self, key: str, check: Callable[[Any], Any], expected: str, default: Any) -> Any:
        if key not in self.mapping:
            return default
        value = self.c.typed(self.mapping, key, self.path, check, expected)
        return default if value is None else value

    def where(self, key: str) -> int:
        return line_of(self.mapping, key) or self.line


class RagParser:
    """Parses the ``rag`` map against the file's models (resolved to full model configs)."""

    def __init__(
        self,
        c: Checker,
        refs: ModelRefs,
        models: Mapping[str, ModelConfig],
        providers: Mapping[str, CustomProvider],
    ) -> None:
        self.c, self.refs, self.models, self.providers = c, refs, models, providers
        self.base = os.path.dirname(os.path.abspath(c.file))

    def parse(self, raw: Any, line: int) -> dict[str, RagSource]:
        mapping = as_mapping(raw)
        if mapping is None:
            self.c.fail(line, "rag", f"expected a mapping, got {kind_of(raw)}")
            return {}
        sources = {}
        for name, value in mapping.items():
            item_line = line_of(mapping, name, value=False) or line
            source = self._source(str(name), value, item_line)
            if source is not None:
                sources[str(name)] = source
        return sources

    def _model(self, r: _Reader, key: str) -> ModelConfig | None:
        ref = r.get(key, as_str, "a model ref", "")
        if not ref:
            return None
        if not self.refs.check(self.c, ref, r.where(key), f"{r.path}.{key}"):
            return None
        model = self.models.get(ref)
        if model is None and (inline := split_inline_ref(ref)) is not None:
            model = ModelConfig(name=ref, provider=inline[0], model=inline[1])
        if model is None:
            return None
        custom = self.providers.get(model.provider)
        return apply_custom_provider(model, custom) if custom is not None else model

    def _paths(self, r: _Reader, key: str) -> tuple[str, ...]:
        docs = r.get(key, as_str_list, "a list of paths", [])
        for index, doc in enumerate(docs):
            if not doc.strip():
                self.c.fail(r.where(key), f"{r.path}.{key}[{index}]", "is an empty path")
        return tuple(os.path.normpath(os.path.join(self.base, d)) for d in docs if d.strip())

    def _source(self, name: str, raw: Any, line: int) -> RagSource | None:
        path = f"rag.{name}"
        mapping = as_mapping(raw)
        if mapping is None:
            self.c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
            return None
        before = len(self.c.problems)
        self.c.keys(mapping, _SOURCE_KEYS, set(), path)
        r = _Reader(self.c, mapping, path, line)
        tool = RagTool()
        if "tool" in mapping:
            tool_map = r.get("tool", as_mapping, "a mapping", {})
            self.c.keys(tool_map, _TOOL_KEYS, set(), f"{path}.tool")
            t = _Reader(self.c, tool_map, f"{path}.tool", r.where("tool"))
            tool = RagTool(**{k: t.get(k, as_str, "a string", "") for k in _TOOL_KEYS})
        docs = self._paths(r, "docs")
        respect_vcs = r.get("respect_vcs", as_bool, "a boolean", True)
        raw_strategies = r.get(
            "strategies", lambda v: v if isinstance(v, list) else None, "a list", []
        )
        if not raw_strategies:
            self.c.fail(
                r.where("strategies"), f"{path}.strategies", "at least one strategy is required"
            )
        strategies = []
        for index, item in enumerate(raw_strategies):
            item_line = line_of(raw_strategies, index) or line
            strategy = self._strategy(item, f"{path}.strategies[{index}]", item_line, docs)
            if strategy is not None:
                strategies.append(strategy)
        types_seen = [s.type for s in strategies]
        for kind in set(types_seen):
            if types_seen.count(kind) > 1:
                where = line_of(mapping, "strategies", value=False) or line
                self.c.fail(where, f"{path}.strategies", f"strategy {kind!r} is listed twice")
        results = RagResults()
        if "results" in mapping:
            results = self._results(mapping["results"], f"{path}.results", r.where("results"))
        if results.fusion is not None and results.fusion.strategy == "weighted":
            missing = [t for t in types_seen if t not in results.fusion.weights]
            if len(types_seen) > 1 and missing:
                self.c.fail(
                    r.where("results"),
                    f"{path}.results.fusion.weights",
                    f"weighted fusion needs a weight for {', '.join(missing)}",
                )
        if len(self.c.problems) > before:
            return None
        return RagSource(
            name=name,
            agent_file=os.path.abspath(self.c.file),
            strategies=tuple(strategies),
            tool=tool,
            docs=docs,
            respect_vcs=respect_vcs,
            results=results,
        )

    def _strategy(
        self, raw: Any, path: str, line: int, shared: tuple[str, ...]
    ) -> RagStrategy | None:
        mapping = as_mapping(raw)
        if mapping is None:
            self.c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
            return None
        kind = mapping.get("type")
        if kind not in STRATEGY_TYPES:
            got = "missing" if kind is None else repr(kind)
            self.c.fail(
                line_of(mapping, "type") or line,
                f"{path}.type",
                f"expected one of {', '.join(STRATEGY_TYPES)} (got {got})",
            )
            return None
        self.c.keys(mapping, _STRATEGY_KEYS[kind], set(), path)
        r = _Reader(self.c, mapping, path, line)
        docs = tuple(dict.fromkeys((*shared, *self._paths(r, "docs"))))
        if not docs:
            self.c.fail(line, f"{path}.docs", "no documents: set docs on the source or strategy")
        fields: dict[str, Any] = {
            "type": kind,
            "docs": docs,
            "database": r.get("database", as_str, "a path to an SQLite database", ""),
            "limit": r.get("limit", as_positive, "a positive integer", 5),
            "respect_vcs": r.get("respect_vcs", as_bool, "a boolean", None),
        }
        if "chunking" in mapping:
            fields["chunking"] = self._chunking(r)
        if kind == "bm25":
            fields["k1"] = r.get("k1", _unit, "a non-negative number", 1.5)
            fields["b"] = r.get("b", _unit, "a number from 0 to 1", 0.75)
            if not 0 <= fields["b"] <= 1:
                self.c.fail(r.where("b"), f"{path}.b", "expected a number from 0 to 1")
            fields["threshold"] = r.get("threshold", _unit, "a non-negative number", 0.0)
            return RagStrategy(**fields)
        fields["threshold"] = r.get("threshold", _unit, "a number from 0 to 1", 0.5)
        fields["embedding_model"] = self._model(r, "embedding_model")
        if "embedding_model" not in mapping:
            self.c.fail(line, f"{path}.embedding_model", f"is required for {kind}")
        if "vector_dimensions" not in mapping:
            self.c.fail(line, f"{path}.vector_dimensions", f"is required for {kind}")
        fields["vector_dimensions"] = r.get(
            "vector_dimensions", as_positive, "a positive integer", 0
        )
        metric = r.get("similarity_metric", as_str, "a string", "cosine_similarity")
        if metric not in SIMILARITY_METRICS:
            self.c.fail(
                r.where("similarity_metric"),
                f"{path}.similarity_metric",
                f"expected one of {', '.join(SIMILARITY_METRICS)}",
            )
        fields["batch_size"] = r.get(
            "embedding_batch_size",
            as_positive,
            "a positive integer",
            r.get("batch_size", as_positive, "a positive integer", 50),
        )
        for key in ("max_embedding_concurrency", "max_indexing_concurrency"):
            fields[key] = r.get(key, as_positive, "a positive integer", 3)
        if kind == "semantic-embeddings":
            fields["chat_model"] = self._model(r, "chat_model")
            if "chat_model" not in mapping:
                self.c.fail(line, f"{path}.chat_model", "is required for semantic-embeddings")
            fields["semantic_prompt"] = r.get(
                "semantic_prompt", as_str, "a string", DEFAULT_SEMANTIC_PROMPT
            )
            fields["ast_context"] = r.get("ast_context", as_bool, "a boolean", False)
        return RagStrategy(**fields)

    def _chunking(self, r: _Reader) -> RagChunking:
        path = f"{r.path}.chunking"
        mapping = r.get("chunking", as_mapping, "a mapping", {})
        self.c.keys(mapping, _CHUNKING_KEYS, set(), path)
        k = _Reader(self.c, mapping, path, r.where("chunking"))
        size = k.get("size", as_positive, "a positive integer", 1000)
        overlap = k.get("overlap", as_count, "a non-negative integer", 75)
        if overlap >= size:
            self.c.fail(k.where("overlap"), f"{path}.overlap", f"must be less than size ({size})")
        code_aware = k.get("code_aware", as_bool, "a boolean", False)
        if code_aware:
            self.c.warn(
                k.where("code_aware"),
                f"{path}.code_aware",
                "greenroom cuts source files as plain text (no tree-sitter grammars)",
            )
        return RagChunking(
            size=size,
            overlap=overlap,
            respect_word_boundaries=k.get("respect_word_boundaries", as_bool, "a boolean", True),
            code_aware=code_aware,
        )

    def _results(self, raw: Any, path: str, line: int) -> RagResults:
        mapping = as_mapping(raw)
        if mapping is None:
            self.c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
            return RagResults()
        self.c.keys(mapping, _RESULTS_KEYS, set(), path)
        r = _Reader(self.c, mapping, path, line)
        fusion = None
        if "fusion" in mapping:
            f_map = r.get("fusion", as_mapping, "a mapping", {})
            self.c.keys(f_map, _FUSION_KEYS, set(), f"{path}.fusion")
            f = _Reader(self.c, f_map, f"{path}.fusion", r.where("fusion"))
            strategy = f.get("strategy", as_str, "a string", "rrf")
            if strategy not in FUSION_STRATEGIES:
                self.c.fail(
                    f.where("strategy"),
                    f"{path}.fusion.strategy",
                    f"expected one of {', '.join(FUSION_STRATEGIES)}",
                )
            weights = f.get("weights", as_mapping, "a mapping of strategy to number", {})
            clean: dict[str, float] = {}
            for key, value in weights.items():
                number = as_number(value)
                if number is None or str(key) not in STRATEGY_TYPES:
                    self.c.fail(
                        line_of(weights, key) or f.where("weights"),
                        f"{path}.fusion.weights.{key}",
                        f"expected a number for one of {', '.join(STRATEGY_TYPES)}",
                    )
                    continue
                clean[str(key)] = number
            k_value = f.get("k", as_positive, "a positive integer", 60)
            fusion = RagFusion(strategy=strategy, k=k_value, weights=clean)
        reranking = None
        if "reranking" in mapping:
            rr_map = r.get("reranking", as_mapping, "a mapping", {})
            self.c.keys(rr_map, _RERANK_KEYS, set(), f"{path}.reranking")
            rr = _Reader(self.c, rr_map, f"{path}.reranking", r.where("reranking"))
            model = self._model(rr, "model")
            if "model" not in rr_map:
                self.c.fail(rr.line, f"{path}.reranking.model", "is required")
            if model is not None:
                reranking = RagReranking(
                    model=model,
                    top_k=rr.get("top_k", as_count, "a non-negative integer", 0),
                    threshold=rr.get("threshold", _unit, "a number from 0 to 1", 0.5),
                    criteria=rr.get("criteria", as_str, "a string", ""),
                )
        return RagResults(
            limit=r.get("limit", as_positive, "a positive integer", 15),
            fusion=fusion,
            reranking=reranking,
            deduplicate=r.get("deduplicate", as_bool, "a boolean", True),
            include_score=r.get("include_score", as_bool, "a boolean", False),
            return_full_content=r.get("return_full_content", as_bool, "a boolean", False),
        )


def parse_rag(
    c: Checker,
    doc: Mapping[Any, Any],
    refs: ModelRefs,
    models: Mapping[str, ModelConfig],
    providers: Mapping[str, CustomProvider],
) -> tuple[dict[str, RagSource], set[str]]:
    """The file's valid ``rag`` sources, and the names of all (an agent may name a bad one)."""
    if "rag" not in doc:
        return {}, set()
    sources = RagParser(c, refs, models, providers).parse(doc["rag"], line_of(doc, "rag") or 1)
    return sources, {str(k) for k in as_mapping(doc["rag"]) or {}}


def agent_rag(
    c: Checker,
    mapping: Mapping[Any, Any],
    path: str,
    sources: Mapping[str, RagSource],
    known: set[str],
) -> tuple[RagSource, ...]:
    """An agent's ``rag``: names of top-level sources (``known``: every name, even a bad one)."""
    line = line_of(mapping, "rag") or own_line(mapping, 1)
    names = c.typed(mapping, "rag", path, as_str_list, "a list of rag source names") or []
    out = []
    for index, name in enumerate(names):
        if name not in known:
            where = line_of(mapping["rag"], index) or line
            c.fail(where, f"{path}.rag[{index}]", f"unknown rag source {name!r}")
        elif name in sources:
            out.append(sources[name])
    return tuple(out)
