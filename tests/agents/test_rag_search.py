"""RAG against live fake servers on 127.0.0.1: an OpenAI-compatible embeddings endpoint that
maps words to vectors deterministically, and the fake Chat Completions server (the agent's
model, the reranker, the summarizer). Real clock: every wait is bounded by ``slow()``."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.agents import LocalRuntime, ToolContext, load_agent_file
from greenroom.agents._rag_config import RagSource
from greenroom.agents.providers import make_provider
from greenroom.agents.providers._base import ModelConfig
from greenroom.agents.tools._rag import RagSearch
from greenroom.domain import RawEvent, ToolCallResponse, Warning
from tests.agents.fake_openai import (
    FakeOpenAI,
    Recorded,
    Reply,
    ToolCallScript,
    text_reply,
    tool_call_reply,
)
from tests.agents.loop_support import FakeIO, start
from tests.mcp.support import FakeHost, until
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(30)  # real clock: the fake servers are real HTTP servers
VOCAB = ("blork", "moss", "teeth", "purple", "kettle", "tea", "swamp", "moon")
ENV = {"PATH": "/usr/bin:/bin"}


def embed(text: str) -> list[float]:
    """One dimension per word of VOCAB (its count), plus a small constant one."""
    words = [w.rstrip("s") for w in "".join(c if c.isalnum() else " " for c in text).split()]
    return [float(words.count(v)) for v in VOCAB] + [0.01]


class FakeEmbeddings(FakeOpenAI):
    """Answers ``POST /v1/embeddings`` with :func:`embed` of each input."""

    def __init__(self) -> None:
        super().__init__()
        self.responder = self.answer
        self.inputs: list[str] = []

    def answer(self, record: Recorded) -> Reply:
        if not record.path.endswith("/embeddings"):
            return Reply(status=404, body={"error": {"message": "not here"}})
        texts = record.json["input"]
        self.inputs.extend(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)
        ]
        body = json.dumps({"object": "list", "data": data, "model": record.json["model"]})
        return Reply(events=(body.encode(),), content_type="application/json")


def write_docs(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir()
    (docs / "diet.md").write_text("What blorks eat: a blork eats moss, only moss, from the swamp.")
    (docs / "kettle.txt").write_text("Put the kettle on for tea. Tea by the kettle, tea at noon.")
    (docs / "looks.md").write_text("A blork has purple teeth and looks at the moon.")
    return docs


def agent_file(root: Path, chat: str, embeddings: str, extra: str = "") -> Path:
    path = root / "agent.yaml"
    path.write_text(
        "agents:\n"
        "  root:\n"
        "    model: main\n"
        "    instruction: Answer from the notes.\n"
        "    rag: [notes]\n"
        "models:\n"
        f"  main: {{provider: openai, model: gpt-fake, base_url: '{chat}'}}\n"
        f"  embedder: {{provider: openai, model: embed-fake, base_url: '{embeddings}'}}\n"
        f"  judge: {{provider: openai, model: judge-fake, base_url: '{chat}'}}\n"
        "rag:\n"
        "  notes:\n"
        "    docs: [./docs]\n"
        "    strategies:\n"
        "      - type: chunked-embeddings\n"
        "        embedding_model: embedder\n"
        "        vector_dimensions: 9\n"
        "        threshold: 0.1\n"
        "        batch_size: 2\n" + extra
    )
    return path


def context(root: Path, host: Any = None, env: Mapping[str, str] = ENV) -> ToolContext:
    return ToolContext(working_dir=root, data_dir=root / "data", env=env, host=host)


def source_of(path: Path) -> RagSource:
    (source,) = load_agent_file(path).agents["root"].rag
    return source


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def servers() -> AsyncIterator[tuple[FakeOpenAI, FakeEmbeddings]]:
    async with trio.open_nursery() as nursery:
        chat = await nursery.start(FakeOpenAI().serve)
        embeddings = await nursery.start(FakeEmbeddings().serve)
        yield chat, embeddings
        chat.stop()
        embeddings.stop()


async def test_an_agent_answers_from_the_indexed_files(tmp_path: Path) -> None:
    docs = write_docs(tmp_path)
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url)
            config = load_agent_file(path)
            chat.script(
                tool_call_reply(ToolCallScript("c1", "notes", ['{"query": ', '"blork moss"}'])),
                text_reply("Blorks eat moss."),
            )
            runtime = LocalRuntime(
                config,
                provider_for=lambda m: make_provider(m, env=ENV),
                tool_context=ToolContext(
                    working_dir=tmp_path, data_dir=tmp_path / "data", env=ENV, agent_file=str(path)
                ),
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(runtime.serve)
                # indexing starts with the runtime, before any turn
                await until(lambda: len(embeddings.inputs) >= 3)
                io = start(FakeIO(), "What do blorks eat?")
                await runtime.run_stream(io)
                nursery.cancel_scope.cancel()
            await runtime.aclose()
    (response,) = [e for e in io.events if isinstance(e, ToolCallResponse)]
    found = json.loads(response.response)
    assert found[0]["source_path"] == str(docs / "diet.md")
    assert "eats moss" in found[0]["content"] and found[0]["chunk_index"] == 0
    assert str(docs / "kettle.txt") not in [f["source_path"] for f in found]  # under threshold
    assert response.tool_definition["annotations"] == {"title": "Query notes", "readOnlyHint": True}
    first, second = chat.requests
    (tool,) = first.json["tools"]
    assert tool["function"]["name"] == "notes"
    assert tool["function"]["parameters"]["required"] == ["query"]
    assert "Search documents in notes" in first.json["messages"][0]["content"]
    assert "eats moss" in second.json["messages"][-1]["content"]
    assert all(r.json["model"] == "embed-fake" for r in embeddings.requests)
    assert "blork moss" in embeddings.inputs  # the query, embedded once per search


async def test_a_changed_file_is_embedded_again_and_only_it(tmp_path: Path) -> None:
    docs = write_docs(tmp_path)
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url)
            search = RagSearch(source_of(path), context(tmp_path))
            result = await search.search({"query": "kettle"})
            assert json.loads(result.output)[0]["source_path"] == str(docs / "kettle.txt")
            assert len(embeddings.inputs) == 4  # three chunks, one query
            (docs / "looks.md").write_text("Nowadays a blork keeps a kettle for tea.")
            result = await search.search({"query": "kettle"})
            paths = [f["source_path"] for f in json.loads(result.output)]
            assert set(paths) == {str(docs / "kettle.txt"), str(docs / "looks.md")}
            assert embeddings.inputs[4:] == ["Nowadays a blork keeps a kettle for tea.", "kettle"]


async def test_an_unreachable_embedder_is_a_prompt_error_result_and_a_warning(
    tmp_path: Path,
) -> None:
    write_docs(tmp_path)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    path = agent_file(tmp_path, url, url)
    with trio.fail_after(slow(10)):
        async with trio.open_nursery() as nursery:
            host = FakeHost(nursery)
            search = RagSearch(source_of(path), context(tmp_path, host))
            assert await search.ensure_started() == ""
            await until(lambda: bool(host.events))
            result = await search.search({"query": "blork"})
    assert result.is_error
    assert result.output.startswith("RAG query failed: chunked-embeddings: embedding endpoint")
    assert "unreachable" in result.output and "check the base_url of embedder" in result.output
    started, *progress, warning = host.events
    assert all(e.type == "rag_indexing_progress" for e in progress)  # type: ignore[union-attr]
    assert started == RawEvent(
        "rag_indexing_started",
        {
            "type": "rag_indexing_started",
            "rag_name": "notes",
            "strategy_name": "chunked-embeddings",
            "agent_name": "",
        },
    )
    assert isinstance(warning, Warning)
    assert warning.message.startswith("rag notes: indexing failed:")


async def test_background_indexing_reports_its_progress(tmp_path: Path) -> None:
    write_docs(tmp_path)
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url)
            async with trio.open_nursery() as nursery:
                host = FakeHost(nursery)
                search = RagSearch(source_of(path), context(tmp_path, host))
                await search.ensure_started()
                await search.ensure_started()  # once only
                await until(lambda: len(host.events) == 5)
            again = RagSearch(source_of(path), context(tmp_path, host))
            assert await again.refresh(reported=True) == {"chunked-embeddings": 0}
    stages = [(e.data["type"], e.data.get("current")) for e in host.events]  # type: ignore[union-attr]
    assert stages == [
        ("rag_indexing_started", None),
        ("rag_indexing_progress", 1),
        ("rag_indexing_progress", 2),
        ("rag_indexing_progress", 3),
        ("rag_indexing_completed", None),
    ]
    assert len(embeddings.inputs) == 3  # indexed once; the second runtime found it up to date


async def test_hybrid_results_are_fused_then_reranked_by_a_chat_model(tmp_path: Path) -> None:
    docs = write_docs(tmp_path)
    extra = (
        "      - type: bm25\n"
        "    results:\n"
        "      reranking: {model: judge, threshold: 0.2, criteria: Prefer looks.}\n"
    )
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url, extra)
            search = RagSearch(source_of(path), context(tmp_path))
            # the reranker fails (nothing scripted: HTTP 400): the fused order stays
            hits = await search.run_query("blork teeth")
            # fused by RRF: looks.md is first in both strategies, diet.md second
            assert [h.path for h in hits] == [str(docs / "looks.md"), str(docs / "diet.md")]
            assert [h.score for h in hits] == [pytest.approx(2 / 61), pytest.approx(2 / 62)]
            chat.script(text_reply('{"scores": [0.1, 0.9]}'))
            hits = await search.run_query("blork teeth")
            assert [(h.path, h.score) for h in hits] == [(str(docs / "diet.md"), 0.9)]
            judged = chat.requests[-1]
            assert judged.json["model"] == "judge-fake"
            assert "Prefer looks." in judged.json["messages"][0]["content"]
            assert "[1] (source: " in judged.json["messages"][1]["content"]
            chat.script(text_reply("no idea"))  # an unusable answer keeps the fused order
            hits = await search.run_query("blork teeth")
            assert [h.path for h in hits] == [str(docs / "looks.md"), str(docs / "diet.md")]


async def test_semantic_embeddings_embed_the_summaries_and_return_the_chunks(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.py").write_text("def f():\n    return 42\n")
    extra = "        chat_model: judge\n        semantic_prompt: 'Sum up ${basename}: ${content}'\n"
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url, extra)
            path.write_text(path.read_text().replace("chunked-embeddings", "semantic-embeddings"))
            chat.script(text_reply("A function about purple blork teeth."))
            search = RagSearch(source_of(path), context(tmp_path))
            result = await search.search({"query": "blork teeth"})
    (found,) = json.loads(result.output)
    assert found["content"] == "def f():\n    return 42"
    assert embeddings.inputs[0] == "A function about purple blork teeth."
    (asked,) = chat.requests
    assert asked.json["messages"][-1]["content"] == "Sum up a.py: def f():\n    return 42"


def test_model_config_is_resolved_with_its_endpoint(tmp_path: Path) -> None:
    path = agent_file(tmp_path, "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    (strategy,) = source_of(path).strategies
    assert strategy.embedding_model == ModelConfig(
        name="embedder", provider="openai", model="embed-fake", base_url="http://127.0.0.1:2/v1"
    )


async def test_a_failing_summarizer_is_an_error_result(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("one chunk")
    (docs / "b.txt").write_text("another chunk")
    extra = "        chat_model: judge\n"
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url, extra)
            path.write_text(path.read_text().replace("chunked-embeddings", "semantic-embeddings"))
            search = RagSearch(source_of(path), context(tmp_path))
            result = await search.search({"query": "chunk"})  # the chat server answers 400
    assert result.is_error
    assert "RAG query failed: semantic-embeddings: summarizing" in result.output
    assert "with openai/judge-fake failed" in result.output
    assert embeddings.inputs == []  # nothing embedded, nothing stored half-way


class FakeGeminiEmbeddings(FakeOpenAI):
    """Answers Gemini's ``batchEmbedContents`` with :func:`embed` of each text."""

    def __init__(self) -> None:
        super().__init__()
        self.responder = self.answer

    def answer(self, record: Recorded) -> Reply:
        if not record.path.endswith(":batchEmbedContents"):
            return Reply(status=404, body={"error": {"message": "not here"}})
        texts = [r["content"]["parts"][0]["text"] for r in record.json["requests"]]
        body = json.dumps({"embeddings": [{"values": embed(t)} for t in texts]})
        return Reply(events=(body.encode(),), content_type="application/json")


async def test_gemini_embeddings(tmp_path: Path) -> None:
    docs = write_docs(tmp_path)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            gemini = await nursery.start(FakeGeminiEmbeddings().serve)
            path = agent_file(tmp_path, "http://127.0.0.1:9/v1", gemini.url)
            text = path.read_text().replace(
                "embedder: {provider: openai, model: embed-fake,",
                "embedder: {provider: google, model: gemini-embed, token_key: MY_KEY,",
            )
            path.write_text(text)
            ctx = ToolContext(
                working_dir=tmp_path, data_dir=tmp_path / "data", env={**ENV, "MY_KEY": "k-1"}
            )
            search = RagSearch(source_of(path), ctx)
            result = await search.search({"query": "purple teeth"})
            gemini.stop()
    found = json.loads(result.output)
    assert found[0]["source_path"] == str(docs / "looks.md")
    request = gemini.requests[-1]
    assert request.path == "/v1beta/models/gemini-embed:batchEmbedContents"
    assert request.headers["x-goog-api-key"] == "k-1"
    (asked,) = request.json["requests"]
    assert asked == {
        "model": "models/gemini-embed",
        "content": {"parts": [{"text": "purple teeth"}]},
        "outputDimensionality": 9,
    }


async def test_a_silent_embedder_ends_the_search_at_its_deadline(tmp_path: Path) -> None:
    write_docs(tmp_path)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            silent = await nursery.start(FakeOpenAI().serve)
            silent.responder = lambda _: Reply(ending="stall")  # headers, then nothing
            path = agent_file(tmp_path, silent.base_url, silent.base_url)
            search = RagSearch(source_of(path), context(tmp_path))
            search.timeout = 0.5  # real clock: the fake server is a real server
            result = await search.search({"query": "blork"})
            silent.stop()
    assert result.is_error
    assert result.output.startswith("RAG query failed: no answer within 0.5 seconds")


GO_KITCHEN = """\
package kitchen

// Boil puts the kettle on for tea.
func Boil(k *Kettle) {
\tk.Water += 1
\tk.Heat()
}

// Feed gives the blork moss from the swamp.
func Feed(b *Blork) {
\tb.Eat("moss")
\tb.Eat("swamp moss")
}
"""
CODE_AWARE = "        chunking: {size: 120, overlap: 20, code_aware: true}\n"


async def test_a_code_aware_search_returns_whole_go_functions(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kitchen.go").write_text(GO_KITCHEN)
    (docs / "notes.md").write_text("Tea notes: " + "the kettle sings at noon. " * 8)
    boil = GO_KITCHEN[: GO_KITCHEN.index("// Feed")].strip()  # the package clause, then Boil
    feed = GO_KITCHEN[GO_KITCHEN.index("// Feed") :].strip()
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url, CODE_AWARE)
            search = RagSearch(source_of(path), context(tmp_path))
            by_query = {
                query: json.loads((await search.search({"query": query})).output)
                for query in ("blork moss swamp", "kettle tea")
            }
    code = [f for f in by_query["kettle tea"] if f["source_path"].endswith(".go")]
    assert [f["content"] for f in code] == [boil]
    assert any(f["source_path"].endswith("notes.md") for f in by_query["kettle tea"])
    assert by_query["blork moss swamp"][0]["content"] == feed
    assert len(boil) + len(feed) > 120  # two chunks: the functions were kept whole, not cut


async def test_ast_context_gives_the_summarizer_the_chunks_symbols(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kitchen.go").write_text(GO_KITCHEN[: GO_KITCHEN.index("// Feed")])
    extra = (
        "        chat_model: judge\n        semantic_prompt: '${ast_context}|${content}'\n"
        "        ast_context: true\n" + CODE_AWARE.replace("120", "1000")
    )
    with trio.fail_after(DEADLINE):
        async with servers() as (chat, embeddings):
            path = agent_file(tmp_path, chat.base_url, embeddings.base_url, extra)
            path.write_text(path.read_text().replace("chunked-embeddings", "semantic-embeddings"))
            chat.script(text_reply("Boils the kettle for tea."))
            search = RagSearch(source_of(path), context(tmp_path))
            result = await search.search({"query": "kettle"})
    (found,) = json.loads(result.output)
    assert found["content"] == GO_KITCHEN[: GO_KITCHEN.index("// Feed")].strip()
    (asked,) = chat.requests
    context_text, _, content = asked.json["messages"][-1]["content"].partition("|")
    assert context_text.splitlines() == [
        "AST context:",
        "- Symbol: Boil",
        "- Kind: function",
        "- Signature: func Boil(k *Kettle)",
        "- Doc: // Boil puts the kettle on for tea.",
        "- Package: kitchen",
        "- Lines: 4-7",
    ]
    assert content == found["content"]
