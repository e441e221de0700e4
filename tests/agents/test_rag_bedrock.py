"""RAG with Bedrock embedding models (Amazon Titan, Cohere) against a fake Bedrock runtime on
127.0.0.1 answering ``InvokeModel``: each request's SigV4 signature is checked against the
test's credentials. Real clock: every wait is bounded by ``slow()``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from urllib.parse import quote

import pytest
import trio
from botocore.credentials import ReadOnlyCredentials

from greenroom.agents import load_agent_file
from greenroom.agents.tools import default_tools_for
from greenroom.agents.tools._rag import RagSearch
from tests.agents.fake_bedrock import FakeBedrock, error_reply, signature_matches
from tests.agents.fake_sse import Recorded, Reply
from tests.agents.test_rag_search import (
    agent_file,
    closed_port,
    context,
    embed,
    source_of,
    write_docs,
)
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(30)  # real clock: the fake server is a real HTTP server
REGION = "eu-west-3"
CREDENTIALS = ReadOnlyCredentials("AKIDEXAMPLE", "secret-example", None)
ENV = {
    "PATH": "/usr/bin:/bin",
    "AWS_ACCESS_KEY_ID": CREDENTIALS.access_key,
    "AWS_SECRET_ACCESS_KEY": CREDENTIALS.secret_key,
}
TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"
COHERE_V4 = "us.cohere.embed-v4:0"  # a cross-region inference profile


class FakeBedrockEmbeddings(FakeBedrock):
    """Answers ``InvokeModel`` of Titan and Cohere embedding models with :func:`embed`,
    refusing any request whose SigV4 signature is missing or wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.responder = self.answer
        self.inputs: list[str] = []
        self.input_types: list[str] = []
        self.most_in_flight = 0

    def answer(self, record: Recorded) -> Reply:
        in_flight = sum(not r.done.is_set() for r in self.requests)
        self.most_in_flight = max(self.most_in_flight, in_flight)
        model = record.path.removeprefix("/model/").removesuffix("/invoke")
        url = f"{self.url}/model/{quote(model, safe='')}/invoke"
        if not record.headers.get("authorization", "").startswith("AWS4-HMAC-SHA256 "):
            return error_reply(403, "AccessDeniedException", "not signed")
        if not signature_matches(record, url, CREDENTIALS, REGION):
            return error_reply(403, "InvalidSignatureException", "signature does not match")
        if model == TITAN:
            assert set(record.json) == {"inputText", "dimensions", "normalize"}
            assert record.json["dimensions"] == 9 and record.json["normalize"] is True
            self.inputs.append(record.json["inputText"])
            body = {"embedding": embed(record.json["inputText"]), "inputTextTokenCount": 3}
        elif model in (COHERE, COHERE_V4):
            self.inputs.extend(record.json["texts"])
            self.input_types.append(record.json["input_type"])
            vectors = [embed(t) for t in record.json["texts"]]
            body = {"embeddings": vectors, "id": "x"}
            if model == COHERE_V4:  # asked for floats of 9 dimensions, answered by type
                assert record.json["output_dimension"] == 9
                assert record.json["embedding_types"] == ["float"]
                body = {"embeddings": {"float": vectors}, "id": "x"}
        else:
            return error_reply(400, "ValidationException", f"no model {model}")
        # the delay lets Titan's one-text calls overlap (what most_in_flight bounds)
        return Reply(
            events=(json.dumps(body).encode(),), delay=0.02, content_type="application/json"
        )


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeBedrockEmbeddings]:
    server: FakeBedrockEmbeddings = await nursery.start(FakeBedrockEmbeddings().serve)
    yield server
    server.stop()


def bedrock_agent(root: Path, endpoint: str, model_id: str, concurrency: int = 2) -> Path:
    """test_rag_search's agent file with a Bedrock embedding model."""
    path = agent_file(root, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")
    opts = f"provider_opts: {{endpoint_url: '{endpoint}', region: {REGION}}}"
    text = path.read_text().replace(
        "embedder: {provider: openai, model: embed-fake, base_url: 'http://127.0.0.1:9/v1'}",
        f"embedder: {{provider: amazon-bedrock, model: '{model_id}', {opts}}}",
    )
    text = text.replace("batch_size: 2", "batch_size: 4")
    path.write_text(text + f"        max_embedding_concurrency: {concurrency}\n")
    return path


async def search(root: Path, path: Path, query: str, env: Mapping[str, str] = ENV) -> list[str]:
    tool = RagSearch(source_of(path), context(root, env=env))
    result = await tool.search({"query": query})
    assert not result.is_error, result.output
    return [found["source_path"] for found in json.loads(result.output)]


async def test_titan_embeds_each_text_signed_within_the_concurrency(
    tmp_path: Path, fake: FakeBedrockEmbeddings
) -> None:
    docs = write_docs(tmp_path)
    (docs / "more.md").write_text("Moon tea. " * 60)  # several chunks: one batch, many calls
    path = bedrock_agent(tmp_path, fake.url, TITAN, concurrency=2)
    with trio.fail_after(DEADLINE):
        paths = await search(tmp_path, path, "what do blorks eat? moss")
    assert paths[0] == str(docs / "diet.md")
    assert str(docs / "kettle.txt") not in paths
    assert all(r.path == f"/model/{TITAN}/invoke" for r in fake.requests)
    assert len(fake.requests) == len(fake.inputs) > 4  # one text per call, every one signed
    assert fake.inputs[-1] == "what do blorks eat? moss"
    assert 1 <= fake.most_in_flight <= 2


@pytest.mark.parametrize("model", [COHERE, COHERE_V4])
async def test_cohere_embeds_documents_and_the_query_as_such(
    tmp_path: Path, fake: FakeBedrockEmbeddings, model: str
) -> None:
    docs = write_docs(tmp_path)
    path = bedrock_agent(tmp_path, fake.url, model)
    with trio.fail_after(DEADLINE):
        paths = await search(tmp_path, path, "kettle tea")
    assert paths == [str(docs / "kettle.txt")]
    assert fake.input_types == ["search_document"] * 3 + ["search_query"]
    assert fake.inputs[-1] == "kettle tea"


async def test_a_bedrock_api_key_is_sent_as_a_bearer_token(
    tmp_path: Path, fake: FakeBedrockEmbeddings
) -> None:
    write_docs(tmp_path)
    path = bedrock_agent(tmp_path, fake.url, COHERE)
    env = {"PATH": "/usr/bin:/bin", "AWS_BEARER_TOKEN_BEDROCK": "bedrock-key"}
    with trio.fail_after(DEADLINE):
        tool = RagSearch(source_of(path), context(tmp_path, env=env))
        result = await tool.search({"query": "kettle"})
    # the fake wants SigV4: its refusal shows in the result, the token in the request
    assert result.is_error
    assert "answered HTTP 403: AccessDeniedException: not signed" in result.output
    assert fake.requests[0].headers["authorization"] == "Bearer bedrock-key"


async def test_an_unreachable_bedrock_endpoint_is_a_prompt_error_result(tmp_path: Path) -> None:
    write_docs(tmp_path)
    path = bedrock_agent(tmp_path, f"http://127.0.0.1:{closed_port()}", TITAN)
    with trio.fail_after(slow(10)):
        tool = RagSearch(source_of(path), context(tmp_path, env=ENV))
        result = await tool.search({"query": "blork"})
    assert result.is_error
    assert result.output.startswith("RAG query failed: chunked-embeddings: embedding endpoint")
    assert "unreachable" in result.output
    assert "check the endpoint of embedder (provider_opts.endpoint_url" in result.output


async def test_a_refused_call_names_the_error(tmp_path: Path, fake: FakeBedrockEmbeddings) -> None:
    write_docs(tmp_path)
    path = bedrock_agent(tmp_path, fake.url, "amazon.titan-embed-text-v2:9")  # unknown to it
    with trio.fail_after(DEADLINE):
        tool = RagSearch(source_of(path), context(tmp_path, env=ENV))
        result = await tool.search({"query": "blork"})
    assert result.is_error
    assert "answered HTTP 400: ValidationException: no model amazon.titan-embed-text-v2:9" in (
        result.output
    )


async def test_other_bedrock_models_and_anthropic_are_refused_at_build(tmp_path: Path) -> None:
    write_docs(tmp_path)
    path = bedrock_agent(tmp_path, "http://127.0.0.1:9", "amazon.nova-pro-v1:0")
    tools = default_tools_for(load_agent_file(path).agents["root"], context(tmp_path, env=ENV))
    assert tools.tools == {}
    (warning,) = tools.warnings
    assert "embedding model amazon-bedrock/amazon.nova-pro-v1:0" in warning
    assert "Titan Text Embeddings (amazon.titan-embed-text-*) and Cohere Embed" in warning

    text = path.read_text().replace("embedding_model: embedder", "embedding_model: anthropic/x")
    path.write_text(text)
    tools = default_tools_for(load_agent_file(path).agents["root"], context(tmp_path, env=ENV))
    (warning,) = tools.warnings
    assert "provider 'anthropic' has no embeddings API" in warning
    assert "google or amazon-bedrock" in warning
    await trio.lowlevel.checkpoint()
