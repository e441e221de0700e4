"""RAG without a network: the agent-file keys, chunking, BM25 ranking, fusion math and the
index file (incremental re-indexing)."""

from __future__ import annotations

import itertools
import json
import os
import textwrap
from pathlib import Path

import pytest
import trio

from greenroom.agents import agent_file_to_json, parse_agent_file
from greenroom.agents._rag_config import RagChunking, RagFusion, RagSource, RagStrategy
from greenroom.agents.tools._base import ToolContext
from greenroom.agents.tools._rag import RagSearch
from greenroom.agents.tools._rag_fusion import FusionError, deduplicate, fuse
from greenroom.agents.tools._rag_index import Hit, bm25_scores, chunk_text, collect_files, tokens
from greenroom.errors import AgentConfigError

EXAMPLES = Path(__file__).with_name("rag_files")


def parse(text: str, file: str = "/srv/agents/agent.yaml"):
    return parse_agent_file(textwrap.dedent(text), file)


def problems(text: str) -> tuple[str, ...]:
    with pytest.raises(AgentConfigError) as info:
        parse(text)
    return info.value.problems


# --- the agent file ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["rag.yaml", "bm25.yaml", "hybrid.yaml", "reranking.yaml", "semantic_embeddings.yaml"]
)
def test_docker_agents_rag_examples_load_without_ignored_keys(name: str) -> None:
    path = EXAMPLES / name
    config = parse_agent_file(path.read_text(), str(path))
    assert not [w for w in config.warnings if "ignored" in w], config.warnings
    (source,) = config.default_agent.rag
    assert source.strategies


def test_hybrid_example_keys_are_read() -> None:
    path = EXAMPLES / "hybrid.yaml"
    config = parse_agent_file(path.read_text(), str(path))
    (source,) = config.agents["root"].rag
    assert source.name == "knowledge_base" and source.tool_name == "knowledge_base"
    assert source.tool.description == "to be used to search for information about blorks"
    embeddings, bm25 = source.strategies
    here = str(EXAMPLES)
    assert embeddings.docs == (f"{here}/blork_field_guide.txt", f"{here}/docs")
    assert embeddings.embedding_model is not None
    assert embeddings.embedding_model.provider == "openai"
    assert embeddings.embedding_model.model == "text-embedding-3-small"
    assert (embeddings.limit, embeddings.threshold, embeddings.batch_size) == (20, 0.5, 100)
    assert (embeddings.vector_dimensions, embeddings.max_embedding_concurrency) == (1536, 5)
    assert embeddings.chunking == RagChunking(1000, 100, True)
    assert (bm25.type, bm25.k1, bm25.b, bm25.threshold, bm25.limit) == ("bm25", 1.5, 0.75, 0.3, 15)
    assert source.results.fusion == RagFusion("rrf", 60)
    assert (source.results.limit, source.results.deduplicate) == (5, True)


def test_the_json_view_lists_an_agents_rag_sources() -> None:
    path = EXAMPLES / "hybrid.yaml"
    config = parse_agent_file(path.read_text(), str(path))
    assert agent_file_to_json(config)["agents"]["root"]["rag"] == ["knowledge_base"]


def test_reranking_and_semantic_examples_resolve_their_models() -> None:
    path = EXAMPLES / "reranking.yaml"
    (source,) = parse_agent_file(path.read_text(), str(path)).agents["root"].rag
    assert source.results.reranking is not None
    assert source.results.reranking.model.model == "gpt-4.1-nano"
    assert source.results.reranking.threshold == 0.5
    assert "official documentation" in source.results.reranking.criteria
    path = EXAMPLES / "semantic_embeddings.yaml"
    (source,) = parse_agent_file(path.read_text(), str(path)).agents["root"].rag
    (strategy,) = source.strategies
    assert strategy.chat_model is not None and strategy.chat_model.model == "gpt-4o-mini"
    assert "${content}" in strategy.semantic_prompt and strategy.ast_context
    assert strategy.docs[0].endswith("/pkg/**/*.go")


BASE = """\
agents:
  root:
    model: openai/x
    rag: [kb]
rag:
  kb:
    docs: [./docs]
    strategies:
"""


@pytest.mark.parametrize(
    ("strategies", "expected"),
    [
        ("      - type: vector\n", "agent.yaml:9: rag.kb.strategies[0].type: expected one of"),
        (
            "      - type: chunked-embeddings\n        vector_dimensions: 3\n",
            "agent.yaml:9: rag.kb.strategies[0].embedding_model: is required",
        ),
        (
            "      - type: chunked-embeddings\n        embedding_model: openai/e\n",
            "agent.yaml:9: rag.kb.strategies[0].vector_dimensions: is required",
        ),
        (
            "      - type: bm25\n        k1: fast\n",
            "agent.yaml:10: rag.kb.strategies[0].k1: expected a non-negative number",
        ),
        (
            "      - type: bm25\n        chunking: {size: 10, overlap: 10}\n",
            "agent.yaml:10: rag.kb.strategies[0].chunking.overlap: must be less than size",
        ),
        (
            "      - type: bm25\n        colour: red\n",
            "agent.yaml:10: rag.kb.strategies[0].colour: unknown key",
        ),
        (
            "      - type: chunked-embeddings\n        embedding_model: nowhere\n"
            "        vector_dimensions: 3\n",
            "agent.yaml:10: rag.kb.strategies[0].embedding_model:",
        ),
        (
            "      - type: bm25\n    results:\n      fusion: {strategy: median}\n",
            "agent.yaml:11: rag.kb.results.fusion.strategy: expected one of rrf, weighted, max",
        ),
        (
            "      - type: bm25\n      - type: bm25\n",
            "agent.yaml:8: rag.kb.strategies: strategy 'bm25' is listed twice",
        ),
        (
            "      - type: bm25\n      - type: chunked-embeddings\n        embedding_model: a/b\n"
            "        vector_dimensions: 2\n    results:\n      fusion:\n"
            "        strategy: weighted\n        weights: {bm25: 1}\n",
            "rag.kb.results.fusion.weights: weighted fusion needs a weight for chunked-embeddings",
        ),
    ],
)
def test_bad_rag_keys_are_errors_naming_the_key(strategies: str, expected: str) -> None:
    found = problems(BASE + strategies)
    assert any(expected in line for line in found), found


def test_an_agent_naming_an_unknown_source_is_an_error() -> None:
    found = problems(BASE.replace("rag: [kb]", "rag: [kb, other]") + "      - type: bm25\n")
    assert any("agents.root.rag[1]: unknown rag source 'other'" in line for line in found), found


def test_relative_docs_start_at_the_agent_file() -> None:
    config = parse(BASE + "      - type: bm25\n        docs: [../more, /abs]\n")
    (strategy,) = config.agents["root"].rag[0].strategies
    assert strategy.docs == ("/srv/agents/docs", "/srv/more", "/abs")


# --- chunks, BM25, fusion --------------------------------------------------------------------


def test_chunks_have_the_size_and_overlap_asked_and_cut_between_words() -> None:
    text = " ".join(f"word{i:02d}" for i in range(40))  # 40 words of 6 letters
    chunks = chunk_text(text, RagChunking(size=50, overlap=14, respect_word_boundaries=True))
    assert all(len(c) <= 50 for c in chunks)
    assert all(c.split()[0].startswith("word") and len(w) == 6 for c in chunks for w in c.split())
    assert " ".join(chunks).split()[-1] == "word39"
    for before, after in itertools.pairwise(chunks):
        assert before.split()[-1] == after.split()[1] or before.split()[-1] == after.split()[0]
    plain = chunk_text("abcdefghij", RagChunking(size=4, overlap=1, respect_word_boundaries=False))
    assert plain == ["abcd", "defg", "ghij"]
    assert chunk_text("   ", RagChunking()) == []
    # a word longer than a chunk is cut, and nothing of it is lost
    long = "x" * 25 + " tail"
    pieces = chunk_text(long, RagChunking(size=10, overlap=2, respect_word_boundaries=True))
    assert all(len(p) <= 10 for p in pieces) and pieces[-1].endswith("tail")
    assert pieces == ["x" * 10, "x" * 10, "x" * 9, "tail"]  # the long word cut, overlapping
    words = "alpha beta gamma delta epsilon zeta eta theta"
    assert chunk_text(words, RagChunking(size=12, overlap=5)) == [
        "alpha beta",
        "beta gamma",
        "gamma delta",
        "delta",
        "epsilon zeta",
        "zeta eta",
        "eta theta",
    ]


def test_bm25_ranks_the_document_with_the_rare_query_words_first() -> None:
    docs = [
        "The kettle boils water for tea in the morning.",
        "Blorks are purple creatures that live in the swamp and eat moss.",
        "The swamp is wet. The swamp is green. Many creatures live in the swamp.",
        "Tea and biscuits.",
    ]
    scores = bm25_scores("what do blorks eat?", [tokens(d) for d in docs], k1=1.5, b=0.75)
    assert scores.index(max(scores)) == 1
    assert scores[0] == 0.0 and scores[3] == 0.0
    # term-frequency saturation and length normalization: b=0 ignores length
    long = "swamp " * 3 + "filler " * 30
    short = "swamp swamp"
    with_b = bm25_scores("swamp", [tokens(long), tokens(short)], k1=1.5, b=1.0)
    without_b = bm25_scores("swamp", [tokens(long), tokens(short)], k1=1.5, b=0.0)
    assert with_b[1] > with_b[0] and without_b[0] > without_b[1]


def hits(*keys: tuple[str, float]) -> list[Hit]:
    return [Hit(path, 0, path, score) for path, score in keys]


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = fuse(
        {"bm25": hits(("a", 9), ("b", 5)), "chunked-embeddings": hits(("b", 0.9), ("c", 0.8))},
        RagFusion("rrf", k=60),
    )
    assert [h.path for h in fused] == ["b", "a", "c"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1].score == pytest.approx(1 / 61)
    assert fused[2].score == pytest.approx(1 / 62)


def test_weighted_and_max_fusion() -> None:
    results = {"bm25": hits(("a", 10), ("b", 2)), "chunked-embeddings": hits(("b", 0.9))}
    weighted = fuse(results, RagFusion("weighted", weights={"bm25": 0.1, "chunked-embeddings": 2}))
    assert [h.path for h in weighted] == ["b", "a"]
    assert [h.score for h in weighted] == pytest.approx([0.2 + 1.8, 1.0])
    assert [(h.path, h.score) for h in fuse(results, RagFusion("max"))] == [("a", 10), ("b", 2)]
    with pytest.raises(FusionError, match="missing weight for strategy: chunked-embeddings"):
        fuse(results, RagFusion("weighted", weights={"bm25": 1}))
    assert fuse({"bm25": hits(("z", 1))}, RagFusion("max")) == hits(("z", 1))


def test_deduplicate_keeps_the_best_ranked_copy() -> None:
    same = [Hit("a", 0, "text", 3), Hit("b", 4, "text", 2), Hit("c", 0, "other", 1)]
    assert deduplicate(same) == [same[0], same[2]]


# --- the index file --------------------------------------------------------------------------


def bm25_source(docs: Path, agent_file: Path) -> RagSource:
    strategy = RagStrategy(type="bm25", docs=(str(docs),), chunking=RagChunking(200, 20), limit=3)
    return RagSource(name="kb", agent_file=str(agent_file), strategies=(strategy,))


async def test_bm25_search_finds_the_right_file_and_follows_changes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tea.txt").write_text("Brewing tea: boil the kettle, wait, pour the water.")
    (docs / "blorks.md").write_text("Blorks eat moss. A blork has purple teeth.")
    (docs / ".hidden").write_text("blork blork blork")
    (docs / "image.bin").write_bytes(b"blork\0\0\0")
    ctx = ToolContext(working_dir=tmp_path, data_dir=tmp_path / "data")
    search = RagSearch(bm25_source(docs, tmp_path / "agent.yaml"), ctx)
    result = await search.search({"query": "What colour are a blork's teeth?"})
    found = json.loads(result.output)
    assert [f["source_path"] for f in found] == [str(docs / "blorks.md")]
    assert found[0]["chunk_index"] == 0 and found[0]["similarity"] > 0
    assert "purple teeth" in found[0]["content"]
    assert search.tool.spec.name == "kb" and search.tool.annotations.read_only
    assert search.tool.spec.parameters["required"] == ["query"]

    # a changed file is read again on the next search; an unchanged one is not
    (docs / "tea.txt").write_text("Blorks drink tea. Their teeth stay purple.")
    stat = (docs / "tea.txt").stat()
    os.utime(docs / "tea.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert await search.refresh() == {"bm25": 1}
    assert await search.refresh() == {"bm25": 0}
    result = await search.search({"query": "blork teeth"})
    paths = {f["source_path"] for f in json.loads(result.output)}
    assert paths == {str(docs / "blorks.md"), str(docs / "tea.txt")}

    # a removed file leaves the index; a second runtime reuses the index file
    (docs / "blorks.md").unlink()
    again = RagSearch(bm25_source(docs, tmp_path / "agent.yaml"), ctx)
    assert await again.refresh() == {"bm25": 0}
    result = await again.search({"query": "blork teeth"})
    assert [f["source_path"] for f in json.loads(result.output)] == [str(docs / "tea.txt")]
    assert len(list((tmp_path / "data" / "rag").glob("kb-bm25-*.sqlite"))) == 1


async def test_an_empty_query_is_an_error_result(tmp_path: Path) -> None:
    ctx = ToolContext(working_dir=tmp_path, data_dir=tmp_path / "data")
    search = RagSearch(bm25_source(tmp_path, tmp_path / "agent.yaml"), ctx)
    result = await search.search({"query": "  "})
    assert result.is_error and "query cannot be empty" in result.output
    await trio.lowlevel.checkpoint()


def test_gitignore_rules_of_the_repository_and_the_listed_directory(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    docs = repo / "docs"
    (docs / "build").mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / ".gitignore").write_text("*.log\n")
    (docs / ".gitignore").write_text("build/\n")
    (docs / "a.md").write_text("a")
    (docs / "b.log").write_text("b")
    (docs / "build" / "c.md").write_text("c")
    (docs / ".secret").write_text("d")
    named = docs / "kept.log"
    named.write_text("named on its own")

    def names(respect_vcs: bool, *extra: str) -> list[str]:
        found = collect_files([str(docs), *extra], respect_vcs)
        return sorted(Path(f.path).relative_to(docs).as_posix() for f in found)

    assert names(True) == ["a.md"]
    assert names(True, str(named)) == ["a.md", "kept.log"]
    assert names(True, str(docs / "**" / "*.md")) == ["a.md"]
    assert names(False) == ["a.md", "b.log", "build/c.md", "kept.log"]


def test_a_strategy_can_override_respect_vcs() -> None:
    config = parse(BASE + "      - type: bm25\n        respect_vcs: false\n")
    (strategy,) = config.agents["root"].rag[0].strategies
    assert strategy.respect_vcs is False
    assert config.agents["root"].rag[0].respect_vcs is True


async def test_a_runtime_sees_what_another_indexed(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("kettle and tea")
    (docs / "b.txt").write_text("swamp moss")
    ctx = ToolContext(working_dir=tmp_path, data_dir=tmp_path / "data")
    first = RagSearch(bm25_source(docs, tmp_path / "agent.yaml"), ctx)
    second = RagSearch(bm25_source(docs, tmp_path / "agent.yaml"), ctx)
    result = await first.search({"query": "blork"})
    assert json.loads(result.output) == []
    (docs / "a.txt").write_text("a blork by the kettle")  # same number of chunks
    assert await second.refresh() == {"bm25": 1}
    result = await first.search({"query": "blork"})  # its own refresh finds nothing to do
    assert [f["content"] for f in json.loads(result.output)] == ["a blork by the kettle"]
