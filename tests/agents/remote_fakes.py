"""Fakes for remote agent sources: one real HTTP server on 127.0.0.1 (a free port) that serves
plain files and speaks the OCI registry API v2 with the anonymous bearer-token flow."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, cast
from urllib.parse import parse_qs

import attrs
import hypercorn.trio
import trio
from hypercorn.config import Config

AGENT_TYPE = "application/vnd.docker.agent.config.v1+json"
TOKEN = "anonymous-pull-token"


def agent_yaml(description: str, *, sub_agents: str = "") -> str:
    subs = f"    sub_agents: [{sub_agents}]\n" if sub_agents else ""
    return (
        "models:\n  m:\n    provider: echo\n    model: echo\n"
        f"agents:\n  root:\n    model: m\n    description: {description}\n"
        f"    instruction: Be {description}.\n{subs}"
    )


def digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


@attrs.define
class FakeWeb:
    """``files``: path -> body (a missing path is a 404); ``push`` puts an agent artifact in
    the registry (as ``docker agent share push`` lays it out)."""

    url: str = ""
    files: dict[str, bytes] = attrs.field(factory=dict)
    manifests: dict[tuple[str, str], bytes] = attrs.field(factory=dict)
    blobs: dict[str, bytes] = attrs.field(factory=dict)
    requests: list[str] = attrs.field(factory=list)
    token_scopes: list[str] = attrs.field(factory=list)
    realm: str = ""  # where the challenge sends clients for a token ("": this server's /token)

    def push(self, repository: str, tag: str, text: str) -> None:
        layer = text.encode()
        config = b"{}"
        self.blobs[digest(layer)] = layer
        self.blobs[digest(config)] = config
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": AGENT_TYPE,
            "config": {"mediaType": AGENT_TYPE, "digest": digest(config), "size": len(config)},
            "layers": [
                {"mediaType": "application/yaml", "digest": digest(layer), "size": len(layer)}
            ],
            "annotations": {"io.docker.agent.version": "v1.0.0"},
        }
        self.manifests[(repository, tag)] = json.dumps(manifest).encode()

    def answer(
        self, path: str, query: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        self.requests.append(path)
        if path == "/token":
            self.token_scopes.extend(parse_qs(query).get("scope", []))
            return 200, {"content-type": "application/json"}, json.dumps({"token": TOKEN}).encode()
        if path.startswith("/v2/"):
            if headers.get("authorization") != f"Bearer {TOKEN}":
                challenge = f'Bearer realm="{self.realm or self.url + "/token"}",service="fake"'
                return 401, {"www-authenticate": challenge}, b"{}"
            repository, kind, ref = path[4:].rsplit("/", 2)
            if kind == "manifests" and (repository, ref) in self.manifests:
                body = self.manifests[(repository, ref)]
                return 200, {"content-type": "application/vnd.oci.image.manifest.v1+json"}, body
            if kind == "blobs" and ref in self.blobs:
                return 200, {"content-type": "application/octet-stream"}, self.blobs[ref]
            return 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
        if path in self.files:
            return 200, {"content-type": "application/yaml"}, self.files[path]
        return 404, {}, b"not found"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": f"{message['type']}.complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        status, extra, body = self.answer(scope["path"], scope["query_string"].decode(), headers)
        out = [(k.encode(), v.encode()) for k, v in extra.items()]
        out.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def fake_web() -> AsyncIterator[FakeWeb]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    web = FakeWeb(url=f"http://127.0.0.1:{sock.getsockname()[1]}")
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.graceful_timeout = 0.5
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(hypercorn.trio.serve, cast(Any, web), config, shutdown_trigger=stop.wait)
        )
        yield web
        stop.set()
