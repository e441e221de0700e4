"""RAG's embeddings through Amazon Bedrock: ``POST {endpoint}/model/{modelId}/invoke``.

Two model families, told apart by the model id (a cross-region prefix such as ``us.`` is
fine): Amazon Titan Text Embeddings (``amazon.titan-embed-text-*``; one text per call, body
``{"inputText", "dimensions", "normalize"}`` (v1 takes ``inputText`` alone), answer
``{"embedding": [...]}``), called for several texts at once, at most ``concurrency`` calls
in flight (the strategy's ``max_embedding_concurrency``, across the files indexed at once); and
Cohere Embed (``cohere.embed-*``; up to 96 texts per call, body ``{"texts", "input_type"}``
with ``search_document`` when indexing and ``search_query`` for a query, plus
``output_dimension`` for v4; answer ``{"embeddings": [[...]]}`` or, v4,
``{"embeddings": {"float": [[...]]}}``).

Authentication, region and endpoint are the Bedrock chat provider's, and so is the signing
(:class:`BedrockProvider`'s ``auth`` and ``headers``): a Bedrock API key as a bearer token, else
SigV4 with the AWS credentials. This module imports botocore: load it only for a Bedrock model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx
import trio

from greenroom.errors import ModelError

from ..providers._base import ModelConfig
from ..providers._bedrock_provider import BedrockProvider, CredentialChain, botocore_chain
from ._base import ToolsetError

COHERE_BATCH = 96  # Cohere Embed's limit of texts per call
REQUEST_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class BedrockEmbeddingError(Exception):
    """A Bedrock embeddings call failed (the message says what to check)."""


def family_of(model: ModelConfig) -> str:
    """``titan`` or ``cohere``; raises ToolsetError for any other Bedrock model."""
    model_id = model.model
    if "amazon.titan-embed-text" in model_id:
        return "titan"
    if "cohere.embed" in model_id:
        return "cohere"
    raise ToolsetError(
        f"embedding model {model.ref}: greenroom embeds with Bedrock's Amazon Titan Text "
        "Embeddings (amazon.titan-embed-text-*) and Cohere Embed (cohere.embed-*) models"
    )


class BedrockEmbeddings:
    """Embeds texts with one Titan or Cohere model on Bedrock (see the module docstring)."""

    def __init__(
        self,
        model: ModelConfig,
        env: Mapping[str, str],
        dimensions: int,
        *,
        concurrency: int = 3,
        chain: CredentialChain = botocore_chain,
    ) -> None:
        self.model = model
        self.family = family_of(model)
        self.dimensions = dimensions
        self.concurrency = max(1, concurrency)
        self.provider = BedrockProvider(model, env=env, chain=chain)
        self.endpoint = self.provider.endpoint
        self.url = f"{self.endpoint}/model/{quote(model.model, safe='')}/invoke"
        self._limiter: trio.CapacityLimiter | None = None
        """Bounds Titan's calls in flight across every ``embed`` (files index concurrently)."""

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        """One vector per text, in order (not checked for length here).

        Raises:
            BedrockEmbeddingError: no credentials, the endpoint is unreachable or answers an
                error or no embeddings.
        """
        try:
            auth = await self.provider.auth(self.model.ref)
        except ModelError as exc:
            raise BedrockEmbeddingError(str(exc)) from None
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
            if self.family == "cohere":
                vectors: list[list[float]] = []
                for start in range(0, len(texts), COHERE_BATCH):
                    batch = texts[start : start + COHERE_BATCH]
                    vectors += self._cohere(
                        await self._call(client, auth, self._cohere_body(batch, query))
                    )
                return vectors
            return await self._titan_all(client, auth, texts)

    async def _titan_all(
        self, client: httpx.AsyncClient, auth: Any, texts: Sequence[str]
    ) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in texts]
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self.concurrency)
        limiter = self._limiter
        failures: list[BedrockEmbeddingError] = []

        async def one(index: int, cancel: trio.CancelScope) -> None:
            async with limiter:
                try:
                    payload = await self._call(client, auth, self._titan_body(texts[index]))
                    out[index] = [float(x) for x in payload["embedding"]]
                except BedrockEmbeddingError as exc:
                    failures.append(exc)
                    cancel.cancel()  # the first failure stops the rest
                except (KeyError, TypeError, ValueError) as exc:
                    failures.append(self._no_embeddings(exc))
                    cancel.cancel()

        async with trio.open_nursery() as nursery:
            for index in range(len(texts)):
                nursery.start_soon(one, index, nursery.cancel_scope)
        if failures:
            raise failures[0]
        return out

    def _titan_body(self, text: str) -> dict[str, Any]:
        if "titan-embed-text-v1" in self.model.model:  # v1: 1536 dimensions, no options
            return {"inputText": text}
        return {"inputText": text, "dimensions": self.dimensions, "normalize": True}

    def _cohere_body(self, texts: Sequence[str], query: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "texts": list(texts),
            "input_type": "search_query" if query else "search_document",
        }
        if "embed-v4" in self.model.model:
            body["output_dimension"] = self.dimensions
            body["embedding_types"] = ["float"]
        return body

    def _cohere(self, payload: Any) -> list[list[float]]:
        try:
            embeddings = payload["embeddings"]
            if isinstance(embeddings, dict):
                embeddings = embeddings["float"]
            return [[float(x) for x in vector] for vector in embeddings]
        except (KeyError, TypeError, ValueError) as exc:
            raise self._no_embeddings(exc) from None

    def _no_embeddings(self, exc: Exception) -> BedrockEmbeddingError:
        return BedrockEmbeddingError(
            f"embedding endpoint {self.url} answered no embeddings: {type(exc).__name__}: {exc}"
        )

    async def _call(self, client: httpx.AsyncClient, auth: Any, body: dict[str, Any]) -> Any:
        raw = json.dumps(body).encode()
        headers = self.provider.headers(auth, self.url, raw, accept="application/json")
        try:
            response = await client.post(self.url, content=raw, headers=headers)
        except httpx.HTTPError as exc:
            raise BedrockEmbeddingError(
                f"embedding endpoint {self.url} unreachable ({type(exc).__name__}: {exc}); "
                f"check the endpoint of {self.model.name} (provider_opts.endpoint_url, "
                "base_url, AWS_ENDPOINT_URL_BEDROCK_RUNTIME), its region and the network"
            ) from None
        if response.status_code != 200:
            kind = response.headers.get("x-amzn-errortype", "").split(":")[0]
            try:
                detail = str(response.json().get("message") or response.text)
            except (ValueError, AttributeError):
                detail = response.text
            raise BedrockEmbeddingError(
                f"embedding endpoint {self.url} answered HTTP {response.status_code}: "
                f"{f'{kind}: ' if kind else ''}{detail[:300]}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise self._no_embeddings(exc) from None
