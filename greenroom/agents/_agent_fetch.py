"""Fetching an agent file over the network: a URL (one GET), or an OCI artifact through the
registry HTTP API v2 (decision 0034).

OCI: the manifest is asked for by tag or digest; a ``401`` with a ``Bearer`` challenge is
answered with an anonymous token from the challenge's realm (``service``, ``scope``) and the
request repeated; the agent file is the manifest's ``application/yaml`` layer (what
``docker agent share push`` makes: an OCI manifest whose config or ``artifactType`` is
``application/vnd.docker.agent.config.v1+json``), read by digest and checked against it.

Every connection goes through the egress guard (``tools/_egress.py``, decision 0021): public
addresses only, plus ``--allow-private-network``; each redirect hop and the token realm are
checked too. httpx is imported here, and this module only when a remote source is used.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import httpx

from ._source_refs import OciReference, RemoteRef
from .tools._egress import guarded_client
from .tools._egress_policy import EgressPolicy

MAX_AGENT_BYTES = 1 << 20  # an agent file is a few KB; anything past 1 MiB is not one
MAX_MANIFEST_BYTES = 4 << 20
AGENT_ARTIFACT_TYPE = "application/vnd.docker.agent.config.v1+json"
AGENT_LAYER_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class FetchFailed(Exception):
    """The source could not be fetched; the message says why, for a person."""


def source_client(policy: EgressPolicy, timeout: float) -> httpx.AsyncClient:
    return guarded_client(policy, timeout=timeout, follow_redirects=True, max_redirects=5)


async def fetch_agent_text(client: httpx.AsyncClient, ref: RemoteRef) -> str:
    """The text of the agent file ``ref`` names.

    Raises:
        FetchFailed: not found, refused, unreachable, too large, not an agent artifact.
    """
    try:
        if ref.kind == "url":
            data = await _get(client, ref.text, {}, MAX_AGENT_BYTES)
        else:
            data = await pull_oci(client, ref.oci)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise FetchFailed(str(exc) or type(exc).__name__) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FetchFailed("the file is not UTF-8 text") from None


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str], limit: int) -> bytes:
    async with client.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            raise FetchFailed(f"GET {url}: HTTP {response.status_code}")
        return await _read_capped(response, url, limit)


async def _read_capped(response: httpx.Response, url: str, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise FetchFailed(f"GET {url}: more than {limit} bytes")
    return bytes(body)


class _Registry:
    """One repository of one registry, with the anonymous bearer token once challenged."""

    def __init__(self, client: httpx.AsyncClient, ref: OciReference) -> None:
        self.client = client
        self.ref = ref
        self.token = ""

    async def get(self, path: str, accept: str, limit: int) -> tuple[bytes, str]:
        """The body and content type of ``/v2/<repository>/<path>``."""
        url = f"{self.ref.api_base}/v2/{self.ref.repository}/{path}"
        for attempt in range(2):
            headers = {"Accept": accept}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            async with self.client.stream("GET", url, headers=headers) as response:
                if response.status_code == 401 and attempt == 0:
                    challenge = response.headers.get("www-authenticate", "")
                    await response.aclose()
                    self.token = await self._anonymous_token(challenge)
                    continue
                if response.status_code == 404:
                    raise FetchFailed(f"{self.ref}: not found in the registry (HTTP 404)")
                if response.status_code != 200:
                    raise FetchFailed(f"GET {url}: HTTP {response.status_code}")
                kind = response.headers.get("content-type", "").split(";")[0].strip()
                return await _read_capped(response, url, limit), kind
        raise FetchFailed(f"{self.ref}: the registry refused the anonymous token (HTTP 401)")

    async def _anonymous_token(self, challenge: str) -> str:
        scheme, _, rest = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise FetchFailed(
                f"{self.ref}: the registry asks for credentials ({scheme or 'no challenge'}); "
                "greenroom pulls agents anonymously"
            )
        params = dict(_CHALLENGE_PARAM.findall(rest))
        realm = params.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise FetchFailed(f"{self.ref}: the registry's token realm {realm!r} is not a URL")
        query = {"scope": params.get("scope") or f"repository:{self.ref.repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        response = await self.client.get(realm, params=query)
        if response.status_code != 200:
            raise FetchFailed(
                f"{self.ref}: no anonymous pull token from {realm} (HTTP {response.status_code})"
            )
        try:
            body = response.json()
        except ValueError:
            body = {}
        token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else ""
        if not isinstance(token, str) or not token:
            raise FetchFailed(f"{self.ref}: the token answer from {realm} holds no token")
        return token


def _agent_layer(ref: OciReference, manifest: Any) -> dict[str, Any]:
    if not isinstance(manifest, dict):
        raise FetchFailed(f"{ref}: the manifest is not a JSON object")
    if "manifests" in manifest:
        raise FetchFailed(f"{ref}: an image index, not an agent artifact (docker agent share push)")
    config = manifest.get("config")
    config = config if isinstance(config, dict) else {}
    kinds = {manifest.get("artifactType"), config.get("mediaType")}
    annotations = manifest.get("annotations") or {}
    marked = isinstance(annotations, dict) and any(
        key in annotations for key in ("io.docker.agent.version", "io.docker.cagent.version")
    )
    if AGENT_ARTIFACT_TYPE not in kinds and not marked:
        raise FetchFailed(
            f"{ref}: not an agent artifact (no {AGENT_ARTIFACT_TYPE} config or artifactType; "
            "push it with docker agent share push)"
        )
    layers = manifest.get("layers")
    found = [
        layer
        for layer in (layers if isinstance(layers, list) else [])
        if isinstance(layer, dict) and layer.get("mediaType") in AGENT_LAYER_TYPES
    ]
    if len(found) != 1 or not isinstance(found[0].get("digest"), str):
        raise FetchFailed(f"{ref}: expected one application/yaml layer, found {len(found)}")
    return found[0]


async def pull_oci(client: httpx.AsyncClient, ref: OciReference) -> bytes:
    """The agent file of the OCI artifact ``ref`` (manifest, then its YAML layer by digest)."""
    registry = _Registry(client, ref)
    raw, _ = await registry.get(f"manifests/{ref.identifier}", MANIFEST_ACCEPT, MAX_MANIFEST_BYTES)
    if ref.digest and _sha256(raw) != ref.digest:
        raise FetchFailed(f"{ref}: the manifest does not match its digest")
    try:
        manifest = json.loads(raw)
    except ValueError:
        raise FetchFailed(f"{ref}: the manifest is not JSON") from None
    layer = _agent_layer(ref, manifest)
    digest = str(layer["digest"])
    blob, _ = await registry.get(f"blobs/{digest}", "*/*", MAX_AGENT_BYTES)
    if _sha256(blob) != digest:
        raise FetchFailed(f"{ref}: the agent layer does not match its digest {digest}")
    return blob


def _sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"
