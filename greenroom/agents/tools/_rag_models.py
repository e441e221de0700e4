"""The model calls of RAG: embeddings and the chat calls that summarize chunks
(``semantic-embeddings``) and rerank results.

Embeddings go to the embedding model's endpoint, found as for chat models. OpenAI-compatible
providers: ``POST {base_url}/embeddings`` (the model's ``base_url``, its vendor's endpoint,
``OPENAI_BASE_URL``, OpenAI's API; the key from ``token_key`` or the vendor's variable).
``google``: Gemini's ``POST {base}/v1beta/models/{model}:batchEmbedContents`` with
``outputDimensionality`` (``base_url``, ``GOOGLE_GEMINI_BASE_URL`` or Google's; the key from
``token_key``, ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY``; not Vertex AI). ``amazon-bedrock``:
Titan Text Embeddings and Cohere Embed through ``InvokeModel``, signed as the Bedrock chat
provider signs (``_rag_bedrock``, loaded only then). Anthropic has no embeddings API: it is
refused when the toolset is built, naming the provider. Chat calls use the model's provider,
whatever its API.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from greenroom.domain import ChatMessage

from ..providers._base import Delta, ModelConfig, ModelRequest, Provider
from ..providers._catalog import VENDORS, api_of, expand_env
from ..providers._factory import _dmr_url, make_provider
from ..providers._keys import read_key
from ..providers._openai_provider import BASE_URL_VAR, DEFAULT_BASE_URL, DEFAULT_KEY_VAR
from ._base import ToolsetError
from ._rag_index import Hit

if TYPE_CHECKING:
    from ._rag_bedrock import BedrockEmbeddings

REQUEST_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
GOOGLE_KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")  # the Google provider's order
GOOGLE_BASE_URL_VAR = "GOOGLE_GEMINI_BASE_URL"
GOOGLE_DEFAULT_URL = "https://generativelanguage.googleapis.com"


class EmbeddingError(Exception):
    """An embedding request failed (the message says what to check)."""


class Embedder:
    """Embeds texts with one model; see the module docstring for the endpoint and key."""

    def __init__(
        self, model: ModelConfig, env: Mapping[str, str], dimensions: int, *, concurrency: int = 3
    ) -> None:
        self.model = model
        self.env = env
        self.dimensions = dimensions
        self.api = api_of(model)
        self.bedrock: BedrockEmbeddings | None = None
        vendor = VENDORS.get(model.provider)
        if self.api == "bedrock":
            from ._rag_bedrock import BedrockEmbeddings  # botocore: only for a Bedrock model

            self.bedrock = BedrockEmbeddings(model, env, dimensions, concurrency=concurrency)
            base_url = self.bedrock.endpoint
        elif self.api == "google":
            base_url = model.base_url or env.get(GOOGLE_BASE_URL_VAR, "").strip()
            self.key_vars: tuple[str, ...] = (
                (model.token_key,) if model.token_key else GOOGLE_KEY_VARS
            )
            self.required = True
            base_url = base_url or GOOGLE_DEFAULT_URL
        elif self.api == "openai":
            base_url = model.base_url or (vendor.base_url if vendor else "")
            if vendor is not None and vendor.name == "dmr" and not base_url:
                base_url = _dmr_url(env)
            custom = base_url or env.get(BASE_URL_VAR, "").strip()
            base_url = custom or DEFAULT_BASE_URL
            if vendor is None or vendor.name == "openai":
                self.key_vars = (model.token_key or DEFAULT_KEY_VAR,)
                self.required = not (custom and not model.token_key)
            else:
                self.key_vars = (model.token_key or vendor.key_var,)
                self.required = bool(vendor.key_var or model.token_key)
        else:
            raise ToolsetError(
                f"embedding model {model.ref}: provider {model.provider!r} has no embeddings "
                "API; use an embedding model of an OpenAI-compatible provider (openai, dmr, a "
                "custom provider with base_url), google or amazon-bedrock"
            )
        try:
            self.base_url = expand_env(base_url, env).rstrip("/")
        except Exception as exc:
            raise ToolsetError(f"embedding model {model.ref}: {exc}") from None

    @property
    def identity(self) -> str:
        return f"{self.api}:{self.model.model}@{self.base_url}/{self.dimensions}"

    def _key(self) -> str:
        for var in self.key_vars[:-1]:
            if self.env.get(var, "").strip():
                return self.env[var].strip()
        try:
            return read_key(self.env, self.key_vars[-1], required=self.required, ref=self.model.ref)
        except Exception as exc:
            raise EmbeddingError(str(exc)) from None

    def _request(self, texts: Sequence[str], key: str) -> tuple[str, Any, dict[str, str]]:
        """URL, JSON body and headers of one embeddings request."""
        if self.api == "google":
            name = f"models/{self.model.model.removeprefix('models/')}"
            requests = [
                {
                    "model": name,
                    "content": {"parts": [{"text": text}]},
                    "outputDimensionality": self.dimensions,
                }
                for text in texts
            ]
            url = f"{self.base_url}/v1beta/{name}:batchEmbedContents"
            return url, {"requests": requests}, {"x-goog-api-key": key}
        body = {"model": self.model.model, "input": list(texts)}
        return f"{self.base_url}/embeddings", body, {"Authorization": f"Bearer {key}"}

    def _vectors(self, payload: Any) -> list[list[float]]:
        if self.api == "google":
            return [[float(x) for x in item["values"]] for item in payload["embeddings"]]
        data = sorted(payload["data"], key=lambda d: int(d.get("index", 0)))
        return [[float(x) for x in item["embedding"]] for item in data]

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        """One vector per text, in order; ``query``: the texts are search queries (Cohere on
        Bedrock embeds them as such), not documents.

        Raises:
            EmbeddingError: no key, the endpoint is unreachable or answers an error, or the
                vectors are not ``dimensions`` long.
        """
        if self.bedrock is not None:
            from ._rag_bedrock import BedrockEmbeddingError

            try:
                vectors = await self.bedrock.embed(texts, query=query)
            except BedrockEmbeddingError as exc:
                raise EmbeddingError(str(exc)) from None
        else:
            vectors = await self._post(texts)
        ref = self.model.ref
        if len(vectors) != len(texts):
            raise EmbeddingError(f"asked {len(texts)} embeddings of {ref}, got {len(vectors)}")
        for vector in vectors:
            if len(vector) != self.dimensions:
                raise EmbeddingError(
                    f"{ref} returned vectors of {len(vector)} dimensions; "
                    f"vector_dimensions is {self.dimensions}"
                )
        return vectors

    async def _post(self, texts: Sequence[str]) -> list[list[float]]:
        url, body, headers = self._request(texts, self._key())
        try:
            async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
                response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise EmbeddingError(
                f"embedding endpoint {url} unreachable ({type(exc).__name__}: {exc}); "
                f"check the base_url of {self.model.name} and that the server runs"
            ) from None
        if response.status_code != 200:
            raise EmbeddingError(
                f"embedding endpoint {url} answered HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            return self._vectors(response.json())
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(
                f"embedding endpoint {url} answered no embeddings: {exc}"
            ) from None


async def _ignore(_: Delta) -> None:
    return None


class ChatModel:
    """One-shot prompts to a chat model (its provider made on first use)."""

    def __init__(self, model: ModelConfig, env: Mapping[str, str], agent_file: str) -> None:
        self.model = model
        self.env = env
        self.base_dir = Path(os.path.dirname(agent_file) or ".")
        self._provider: Provider | None = None

    async def ask(self, system: str, prompt: str) -> str:
        if self._provider is None:
            self._provider = make_provider(self.model, env=self.env, base_dir=self.base_dir)
        messages = [ChatMessage(role="user", content=prompt)]
        if system:
            messages.insert(0, ChatMessage(role="system", content=system))
        request = ModelRequest(model=self.model, messages=tuple(messages), thinking=False)
        response = await self._provider.complete(request, _ignore)
        return response.content


def semantic_prompt(
    template: str, path: str, index: int, content: str, ast_context: str = ""
) -> str:
    """``template`` with ``${path}``, ``${basename}``, ``${chunk_index}``, ``${content}``
    and ``${ast_context}`` (the chunk's symbols with ``ast_context`` and ``code_aware``;
    else empty) filled in."""
    values = {
        "path": path,
        "basename": os.path.basename(path),
        "chunk_index": str(index),
        "content": content,
        "ast_context": ast_context,
    }
    return re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


RERANK_SYSTEM = (
    "You judge how relevant documents are to a search query. Answer only with JSON: "
    '{"scores": [s0, s1, ...]}, one number from 0 (irrelevant) to 1 (answers the query) '
    "per document, in the order given."
)


def rerank_prompt(query: str, hits: Sequence[Hit], criteria: str) -> tuple[str, str]:
    system = RERANK_SYSTEM + (f"\n\nRelevance criteria:\n{criteria.strip()}" if criteria else "")
    parts = [f"Query:\n{query}\n\nDocuments:"]
    for number, hit in enumerate(hits):
        parts.append(f"[{number}] (source: {hit.path}, chunk: {hit.index}):\n{hit.content}")
    return system, "\n\n".join(parts)


def parse_scores(text: str, count: int) -> list[float]:
    """The ``count`` scores of a rerank answer. Raises ValueError when there are none."""
    match = re.search(r"\{.*\}|\[.*\]", text, re.DOTALL)
    if match is None:
        raise ValueError("no JSON in the rerank answer")
    value: Any = json.loads(match.group(0))
    if isinstance(value, dict):
        value = value.get("scores")
    if not isinstance(value, list) or len(value) != count:
        raise ValueError(f"expected {count} scores")
    return [min(max(float(v), 0.0), 1.0) for v in value]
