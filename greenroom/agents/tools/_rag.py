"""``rag``: the search tool an agent gets for each ``rag`` source it lists (docker-agent's).

The tool is named after the source (or its ``tool.name``), takes ``{"query": ...}`` and answers
a JSON list of ``{source_path, content, similarity, chunk_index}``, best first, at most 10.

Indexing is a service of the runtime: when the runtime is served, each strategy of the source
brings its index up to date in the background (files added, changed or removed since the
last run; see ``_rag_index.py``), reported as docker-agent's ``rag_indexing_started``,
``rag_indexing_progress`` and ``rag_indexing_completed`` events when there is anything to
read; a failure is a ``warning`` event naming what to fix. Every
search first brings the index up to date again (only files whose size or mtime changed are
read), so a changed file is found by the next search. A search is bounded by
:data:`SEARCH_TIMEOUT`; an unreachable embedding endpoint is an error result, not a stuck turn.

Strategies: ``bm25`` (Okapi BM25 over the chunks' words), ``chunked-embeddings`` (each chunk
embedded; cosine similarity, the nearest found by sqlite-vec and scored exactly, or an
exact scan in Python where sqlite-vec cannot be loaded) and ``semantic-embeddings`` (a chat model
summarizes each chunk, the summary is embedded, the chunk is returned). Several strategies
are fused (``results.fusion``), optionally reranked by a chat model, limited, deduplicated.
With ``chunking.code_aware`` Go and Python files are cut at their functions (``_rag_code.py``)
and ``ast_context`` gives the summarizer each chunk's symbols.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from greenroom.domain import RawEvent, Warning

from .._config import ToolsetConfig
from .._rag_config import RagReranking, RagSource, RagStrategy
from .._tool_values import ToolResult, error
from ..providers._base import ToolSpec
from ._base import (
    FunctionTool,
    ServicesUnavailable,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolsetError,
)
from ._rag_code import CodeChunk, code_chunks
from ._rag_fusion import FusionError, deduplicate, fuse
from ._rag_index import (
    FileState,
    Hit,
    IndexStore,
    bm25_scores,
    chunk_text,
    collect_files,
    cosine,
    pack,
    read_text,
    tokens,
    unpack,
)
from ._rag_models import (
    ChatModel,
    Embedder,
    EmbeddingError,
    parse_scores,
    rerank_prompt,
    semantic_prompt,
)
from ._registry import Toolset, register

log = logging.getLogger(__name__)

Report = Callable[[str, int, int], None]
SEARCH_TIMEOUT = 120.0
"""Seconds one search may take, index refresh included; then it is an error result."""
MAX_RESULTS = 10


class RagError(Exception):
    """Indexing or a search failed (the message is shown to the model or the user)."""


class Strategy:
    """One strategy of a source: its index file and how it scores a query."""

    def __init__(self, config: RagStrategy, source: RagSource, ctx: ToolContext) -> None:
        self.config = config
        self.source = source
        self.embedder: Embedder | None = None
        self.summarizer: ChatModel | None = None
        if config.embedding_model is not None:
            self.embedder = Embedder(
                config.embedding_model,
                ctx.env,
                config.vector_dimensions,
                concurrency=config.max_embedding_concurrency,
            )
        if config.chat_model is not None:
            self.summarizer = ChatModel(config.chat_model, ctx.env, source.agent_file)
        build = {
            "type": config.type,
            "chunking": [config.chunking.size, config.chunking.overlap],
            "words": config.chunking.respect_word_boundaries,
            "embedder": self.embedder.identity if self.embedder else "",
            "summarizer": config.chat_model.ref if config.chat_model else "",
            "prompt": config.semantic_prompt if config.chat_model else "",
        }
        if config.chunking.code_aware:  # only then: indexes built before it stay valid
            build["code_aware"] = True
            build["ast_context"] = config.ast_context
        name = f"{source.agent_file}\0{source.name}\0{config.type}\0{config.database}"
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{source.name}-{config.type}")
        path = Path(ctx.data_dir) / "rag" / f"{safe}-{digest}.sqlite"
        self.store = IndexStore(path, json.dumps(build, sort_keys=True))
        self._opened = False
        self._tokenized: tuple[int, list[list[str]]] | None = None
        """The chunks' words, with a hash of the chunks they were read from (another runtime
        may have changed the index file)."""

    @property
    def name(self) -> str:
        return self.config.name

    async def refresh(self, report: Report | None = None) -> int:
        """Bring the index up to date; returns how many files were (re)indexed. ``report``
        hears ``(stage, current, total)`` when files are to be read: ``started``, then
        ``progress`` (at most about 20 times), then ``completed``."""
        if not self._opened:
            await trio.to_thread.run_sync(self.store.open)
            self._opened = True
        respect_vcs = self.config.respect_vcs
        if respect_vcs is None:
            respect_vcs = self.source.respect_vcs
        files = await trio.to_thread.run_sync(collect_files, self.config.docs, respect_vcs)
        stale, removed = await trio.to_thread.run_sync(self.store.changed, files)
        if removed:
            await trio.to_thread.run_sync(self.store.remove, removed)
        indexed = done = 0
        total = len(stale)
        limiter = trio.CapacityLimiter(self.config.max_indexing_concurrency)
        failures: list[BaseException] = []

        async def one(state: FileState) -> None:
            nonlocal indexed, done
            async with limiter:
                try:
                    if await self._index_file(state):
                        indexed += 1
                except (RagError, EmbeddingError, OSError, sqlite3.Error) as exc:
                    failures.append(exc)
            done += 1
            if report is not None and (done * 20 // total != (done - 1) * 20 // total):
                report("progress", done, total)

        if report is not None and stale:
            report("started", 0, total)
        async with trio.open_nursery() as nursery:
            for state in stale:
                nursery.start_soon(one, state)
        if stale or removed:
            self._tokenized = None
        if failures:
            raise RagError(f"{self.name}: {failures[0]}")
        if report is not None and stale:
            report("completed", total, total)
        return indexed

    async def _index_file(self, state: FileState) -> bool:
        text, sha = await trio.to_thread.run_sync(read_text, state.path)
        if await trio.to_thread.run_sync(self.store.same_hash, state.path, sha, state):
            return False
        if self.config.chunking.code_aware:
            cut = await trio.to_thread.run_sync(code_chunks, state.path, text, self.config.chunking)
        else:
            cut = [CodeChunk(piece) for piece in chunk_text(text, self.config.chunking)]
        chunks = [piece.content for piece in cut]
        vectors: list[bytes | None] = [None] * len(chunks)
        if self.embedder is not None and chunks:
            texts = chunks
            if self.summarizer is not None:
                texts = await self._summaries(state.path, cut)
            size = self.config.batch_size
            for start in range(0, len(texts), size):
                batch = await self.embedder.embed(texts[start : start + size])
                for offset, vector in enumerate(batch):
                    vectors[start + offset] = pack(vector)
        await trio.to_thread.run_sync(self.store.replace, state, sha, chunks, vectors)
        return True

    async def _summaries(self, path: str, chunks: list[CodeChunk]) -> list[str]:
        assert self.summarizer is not None
        out = [""] * len(chunks)
        limiter = trio.CapacityLimiter(self.config.max_embedding_concurrency)
        failures: list[str] = []

        async def one(index: int) -> None:
            async with limiter:
                chunk = chunks[index]
                context = chunk.ast_context() if self.config.ast_context else ""
                prompt = semantic_prompt(
                    self.config.semantic_prompt, path, index, chunk.content, context
                )
                assert self.summarizer is not None
                try:
                    out[index] = (await self.summarizer.ask("", prompt)).strip() or chunk.content
                except Exception as exc:  # any provider failure: reported, not raised here
                    failures.append(
                        f"summarizing {path} with {self.summarizer.model.ref} failed: {exc}"
                    )

        async with trio.open_nursery() as nursery:
            for index in range(len(chunks)):
                nursery.start_soon(one, index)
        if failures:
            raise RagError(failures[0])
        return out

    async def query(self, text: str) -> list[Hit]:
        limit, threshold = self.config.limit, self.config.threshold
        if self.embedder is None:
            rows = await trio.to_thread.run_sync(self.store.chunks)
            key = hash(tuple(row[2] for row in rows))
            if self._tokenized is None or self._tokenized[0] != key:
                self._tokenized = (key, [tokens(row[2]) for row in rows])
            scores = bm25_scores(text, self._tokenized[1], self.config.k1, self.config.b)
        else:
            (vector,) = await self.embedder.embed([text], query=True)
            packed = pack(vector)
            query = unpack(packed)
            found = await trio.to_thread.run_sync(self.store.nearest, packed, limit)
            rows = found if found is not None else await trio.to_thread.run_sync(self.store.chunks)
            scores = await trio.to_thread.run_sync(
                lambda: [cosine(query, unpack(row[3])) if row[3] else 0.0 for row in rows]
            )
        hits = [
            Hit(path, index, content, score)
            for (path, index, content, _), score in zip(rows, scores, strict=True)
            if score >= threshold and score > 0
        ]
        hits.sort(key=lambda hit: -hit.score)
        return hits[:limit]


class RagSearch:
    """The search tool of one source, and its background indexing (a live toolset)."""

    version = 0

    def __init__(self, source: RagSource, ctx: ToolContext) -> None:
        self.source = source
        self.ctx = ctx
        self.strategies = [Strategy(s, source, ctx) for s in source.strategies]
        self.reranker: ChatModel | None = None
        if source.results.reranking is not None:
            rr = source.results.reranking
            self.reranker = ChatModel(rr.model, ctx.env, source.agent_file)
        self._lock = trio.Lock()
        self._started = False
        self.timeout = SEARCH_TIMEOUT
        name = source.tool_name
        description = source.tool.description or (
            f"Search the documents of {name} for passages relevant to a question. Give a "
            "natural-language query; the answer lists the best matching chunks with their files."
        )
        self.tool = FunctionTool(
            ToolSpec(
                name,
                description,
                {
                    "type": "object",
                    "properties": {"query": {"type": "string", "description": "Search query"}},
                    "required": ["query"],
                    "additionalProperties": False,
                },
            ),
            self.search,
            ToolAnnotations(title=f"Query {name}", read_only=True),
            "knowledge",
        )
        self.instructions = source.tool.instruction or (
            f"Search documents in {name} to find relevant code or documentation. "
            "Provide a clear search query describing what you need."
        )

    # --- LiveTools -----------------------------------------------------------------------------

    def current(self) -> tuple[list[Tool], str]:
        return [self.tool], self.instructions

    async def ensure_started(self) -> str:
        """Start the background indexing once (when the runtime is served)."""
        if self._started or self.ctx.host is None:
            return ""
        try:
            self.ctx.host.start_service(self._index_in_background)
        except ServicesUnavailable:
            return ""
        self._started = True
        return ""

    def _report(self, strategy: str) -> Report:
        """Reports a strategy's indexing as docker-agent's ``rag_indexing_*`` events."""

        def report(stage: str, current: int, total: int) -> None:
            data: dict[str, Any] = {
                "type": f"rag_indexing_{stage}",
                "rag_name": self.source.name,
                "strategy_name": strategy,
            }
            if stage == "progress":
                data.update(current=current, total=total)
            data["agent_name"] = self.ctx.agent_name
            if self.ctx.host is not None:
                self.ctx.host.notify(RawEvent(data["type"], data))

        return report

    async def _index_in_background(self) -> None:
        try:
            counts = await self.refresh(reported=True)
        except Exception as exc:  # a service must not fail the runtime: reported instead
            text = (
                f"rag {self.source.name}: indexing failed: {exc}. Searches will retry; "
                "fix the model endpoint or the documents and search again."
            )
            log.warning("%s", text)
            if self.ctx.host is not None:
                self.ctx.host.notify(Warning(message=text, agent_name=self.ctx.agent_name))
            return
        log.info("rag %s: index up to date (%s)", self.source.name, counts)

    async def refresh(self, *, reported: bool = False) -> dict[str, int]:
        """Bring every strategy's index up to date (one refresh at a time); ``reported``:
        with ``rag_indexing_*`` events (the background indexing)."""
        async with self._lock:
            counts: dict[str, int] = {}
            for strategy in self.strategies:
                report = self._report(strategy.name) if reported else None
                counts[strategy.name] = await strategy.refresh(report)
            return counts

    # --- the tool ------------------------------------------------------------------------------

    async def search(self, args: Mapping[str, Any]) -> ToolResult:
        query = str(args.get("query") or "").strip()
        if not query:
            return error("query cannot be empty")
        try:
            with trio.fail_after(self.timeout):
                hits = await self.run_query(query)
        except trio.TooSlowError:
            return error(
                f"RAG query failed: no answer within {self.timeout:g} seconds (the index "
                "may still be being built, or a model endpoint is slow); try again later"
            )
        except (RagError, EmbeddingError, FusionError, OSError, sqlite3.Error) as exc:
            return error(f"RAG query failed: {exc}")
        out = [
            {
                "source_path": hit.path,
                "content": hit.content,
                "similarity": hit.score,
                "chunk_index": hit.index,
            }
            for hit in sorted(hits, key=lambda h: -h.score)[:MAX_RESULTS]
        ]
        return ToolResult(json.dumps(out, ensure_ascii=False))

    async def run_query(self, query: str) -> list[Hit]:
        await self.refresh()
        results: dict[str, list[Hit]] = {}
        for strategy in self.strategies:
            results[strategy.name] = await strategy.query(query)
        hits = fuse(results, self.source.results.fusion)
        options = self.source.results
        if options.reranking is not None and self.reranker is not None:
            hits = await self._rerank(query, hits, options.reranking)
        hits = hits[: options.limit]
        if options.return_full_content:
            hits = await trio.to_thread.run_sync(_full_documents, hits)
        if options.deduplicate:
            hits = deduplicate(hits)
        return hits

    async def _rerank(self, query: str, hits: list[Hit], config: RagReranking) -> list[Hit]:
        """Hits scored by the rerank model, those under its threshold dropped; on failure the
        hits as they were (as upstream)."""
        top = config.top_k or self.source.results.limit
        head, tail = hits[:top], hits[top:]
        if not head or self.reranker is None:
            return hits
        system, prompt = rerank_prompt(query, head, config.criteria)
        try:
            scores = parse_scores(await self.reranker.ask(system, prompt), len(head))
        except Exception as exc:
            log.warning("rag %s: reranking failed, keeping the order: %s", self.source.name, exc)
            return hits
        scored = [
            Hit(h.path, h.index, h.content, s)
            for h, s in zip(head, scores, strict=True)
            if s >= config.threshold
        ]
        scored.sort(key=lambda hit: -hit.score)
        return scored + tail


def _full_documents(hits: list[Hit]) -> list[Hit]:
    """Each hit's whole file instead of its chunk (one per file, the best-ranked)."""
    out: list[Hit] = []
    seen: set[str] = set()
    for hit in hits:
        if hit.path in seen:
            continue
        seen.add(hit.path)
        try:
            text, _ = read_text(hit.path)
        except OSError:
            text = hit.content
        out.append(Hit(hit.path, 0, text, hit.score))
    return out


@register("rag")
def rag_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    source = config.options.get("source")
    if not isinstance(source, RagSource):
        raise ToolsetError("a rag toolset is made from an agent's rag sources")
    search = RagSearch(source, ctx)
    return Toolset([], live=search)
