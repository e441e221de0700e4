"""``openapi``: one tool per operation of an OpenAPI 3 document (spec §2.9).

The document (JSON or YAML, at most 10 MiB) is read from ``url`` when the toolset is built —
an ``http(s)`` URL, or a file path relative to the working directory — and local ``$ref``s
(``#/...``) are resolved; external ones are not followed. GET, HEAD and OPTIONS operations are
read-only (they run without asking); the others ask. A status of 400 or more is a tool error
``HTTP <code>: <body>``.
"""

from __future__ import annotations

import io
import json
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import trio
from ruamel.yaml import YAML

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import (
    FunctionTool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolsetError,
    error,
    limit_output,
)
from ._egress import PUBLIC_ONLY, EgressPolicy, guarded_client, toolset_policy
from ._expand import expand
from ._http import USER_AGENT, read_limited
from ._registry import Toolset, register

SPEC_LIMIT = 10 * 1024 * 1024
TIMEOUT = 30.0
METHODS = ("get", "post", "put", "patch", "delete", "head", "options")
READ_ONLY = ("get", "head", "options")


def parse_document(raw: bytes) -> dict[str, Any]:
    if len(raw) >= SPEC_LIMIT:
        raise ToolsetError("OpenAPI spec too large")
    try:
        doc = YAML(typ="safe").load(io.BytesIO(raw))
    except Exception as exc:
        raise ToolsetError(f"failed to parse OpenAPI spec: {exc}") from None
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3"):
        raise ToolsetError("not an OpenAPI 3 document")
    return doc


async def load_document(
    source: str, root: Path, policy: EgressPolicy = PUBLIC_ONLY
) -> tuple[dict[str, Any], str]:
    """The parsed document and the URL it came from (a file URL for local files)."""
    if source.startswith(("http://", "https://")):
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        try:
            with trio.fail_after(TIMEOUT):
                async with (
                    guarded_client(policy, timeout=None) as client,
                    client.stream("GET", source, headers=headers) as response,
                ):
                    raw, _ = await read_limited(response, SPEC_LIMIT)
        except (httpx.HTTPError, trio.TooSlowError) as exc:
            raise ToolsetError(f"failed to fetch OpenAPI spec: {exc}") from None
        if response.status_code != 200:
            raise ToolsetError(f"failed to fetch OpenAPI spec: HTTP {response.status_code}")
        return parse_document(raw), source
    path = Path(source) if Path(source).is_absolute() else root / source
    try:
        raw = await trio.Path(path).read_bytes()
    except OSError as exc:
        raise ToolsetError(f"failed to read OpenAPI spec: {exc}") from None
    return parse_document(raw), path.as_uri()


def resolve(doc: Any, node: Any, depth: int = 0) -> Any:
    """``node`` with local ``$ref``s replaced (bounded depth: recursive schemas stop)."""
    if depth > 20:
        return {}
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#/"):
                return {}
            target: Any = doc
            for part in ref[2:].split("/"):
                target = (
                    target.get(part.replace("~1", "/").replace("~0", "~"))
                    if isinstance(target, dict)
                    else None
                )
            return resolve(doc, target or {}, depth + 1)
        return {k: resolve(doc, v, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(doc, v, depth + 1) for v in node]
    return node


def sanitize(name: str) -> str:
    name = re.sub(r"[/\-.]", "_", name).replace("{", "").replace("}", "")
    while "__" in name:
        name = name.replace("__", "_")
    return name.strip("_")


def base_url(doc: Mapping[str, Any], spec_url: str) -> str:
    servers = doc.get("servers")
    if (
        isinstance(servers, list)
        and servers
        and isinstance(servers[0], dict)
        and servers[0].get("url")
    ):
        return urllib.parse.urljoin(spec_url, str(servers[0]["url"])).rstrip("/")
    parts = urllib.parse.urlsplit(spec_url)
    return f"{parts.scheme}://{parts.netloc}"


def _operation_tool(
    doc: dict[str, Any],
    base: str,
    path: str,
    method: str,
    op: dict[str, Any],
    headers: dict[str, str],
    policy: EgressPolicy,
) -> FunctionTool:
    name = sanitize(str(op.get("operationId") or f"{method}_{path}"))
    summary = str(op.get("summary") or "")
    description = str(op.get("description") or "")
    if not summary and description:
        summary = description[:200] + ("..." if len(description) > 200 else "")
    summary = summary or f"{method.upper()} {path}"
    properties: dict[str, Any] = {}
    required: list[str] = []
    locations: dict[str, str] = {}
    for param in resolve(doc, op.get("parameters") or []):
        if not isinstance(param, dict) or param.get("in") not in ("path", "query", "header"):
            continue
        schema = param.get("schema") or {}
        kind = schema.get("type") or "string"
        prop: dict[str, Any] = {"type": kind[0] if isinstance(kind, list) else kind}
        for key in ("description",):
            if param.get(key):
                prop[key] = param[key]
        for key in ("enum", "default"):
            if key in schema:
                prop[key] = schema[key]
        properties[param["name"]] = prop
        locations[param["name"]] = param["in"]
        if param.get("required"):
            required.append(param["name"])
    body = resolve(doc, op.get("requestBody") or {})
    body_schema: Any = (
        (body.get("content", {}).get("application/json", {}) or {}).get("schema", {})
        if isinstance(body, dict)
        else {}
    )
    body_props: Any = body_schema.get("properties") or {}
    for key, prop in body_props.items():
        item: dict[str, Any] = {"type": "object"}
        item.update(prop or {})
        properties[f"body_{key}"] = item
    required += [f"body_{key}" for key in body_schema.get("required") or ()]
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required

    async def call(arguments: Mapping[str, Any]) -> ToolResult:
        url_path = path
        query: dict[str, str] = {}
        body_fields: dict[str, Any] = {}
        sent = {"Accept": "application/json", "User-Agent": USER_AGENT, **headers}
        for key, value in arguments.items():
            if key.startswith("body_"):
                body_fields[key[5:]] = value
            elif "{" + key + "}" in url_path:
                url_path = url_path.replace(
                    "{" + key + "}", urllib.parse.quote(str(value), safe="")
                )
            elif locations.get(key) == "header":
                sent[key] = str(value)
            else:
                query[key] = str(value)
        content = None
        if body_fields:
            content = json.dumps(body_fields).encode()
            sent["Content-Type"] = "application/json"
        try:
            with trio.fail_after(TIMEOUT):
                async with (
                    guarded_client(policy, timeout=None) as client,
                    client.stream(
                        method.upper(), base + url_path, params=query, headers=sent, content=content
                    ) as response,
                ):
                    data, truncated = await read_limited(response)
        except trio.TooSlowError:
            return error(f"Error calling tool: request failed: timed out after {TIMEOUT:g}s")
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return error(f"Error calling tool: request failed: {exc}")
        text = data.decode(errors="replace")
        if truncated:
            text = "[WARNING: Response truncated at 1MB limit]\n" + text
        if response.status_code >= 400:
            return error(limit_output(f"HTTP {response.status_code}: {text}"))
        return ToolResult(limit_output(text))

    annotations = ToolAnnotations(title=summary, read_only=method in READ_ONLY)
    return FunctionTool(ToolSpec(name, summary, parameters), call, annotations, "openapi")


@register("openapi")
def openapi_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    source = config.options.get("url")
    if not isinstance(source, str) or not source:
        raise ToolsetError("url is required")
    env = {"env": dict(ctx.env)}
    try:
        policy = toolset_policy(config.options, ctx.egress)
    except ValueError as exc:
        raise ToolsetError(str(exc)) from None
    raw_headers = config.options.get("headers") or {}
    headers = (
        {str(k): expand(str(v), env) for k, v in raw_headers.items()}
        if isinstance(raw_headers, Mapping)
        else {}
    )

    async def start() -> Toolset:
        doc, spec_url = await load_document(expand(source, env), Path(ctx.working_dir), policy)
        base = base_url(doc, spec_url)
        tools = []
        for path, item in (doc.get("paths") or {}).items():
            if not isinstance(item, dict):
                continue
            for method in METHODS:
                op = item.get(method)
                if isinstance(op, dict):
                    tools.append(_operation_tool(doc, base, str(path), method, op, headers, policy))
        info = doc.get("info")
        title = str(info.get("title") or "the API") if isinstance(info, dict) else "the API"
        text = f"## {title}\n\nEach tool calls one operation of {title} at {base}."
        return Toolset(list(tools), text)

    return Toolset([], start=start)
