"""``api``: one tool that calls one HTTP endpoint the author configured (spec §2.8).

``${env.X}`` in the endpoint and header values is expanded when the toolset is built; for GET
the endpoint is expanded again per call with the arguments (``${city}``), URL-escaped. POST
sends the arguments as a JSON body. The response body (at most 1 MiB, then 30 000 bytes) is
the result whatever the status, as upstream.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
import trio

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
from ._egress import guarded_client, toolset_policy
from ._expand import expand
from ._http import USER_AGENT, BadURL, check_url, read_limited
from ._registry import Toolset, register

TIMEOUT = 30.0


@register("api")
def api_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    api = config.options.get("api_config")
    if not isinstance(api, Mapping) or not isinstance(api.get("endpoint"), str):
        raise ToolsetError("api_config with an endpoint is required")
    env = {"env": dict(ctx.env)}
    try:
        policy = toolset_policy(config.options, ctx.egress)
    except ValueError as exc:
        raise ToolsetError(str(exc)) from None
    endpoint = expand(str(api["endpoint"]), env)
    try:
        check_url(endpoint)
    except BadURL as exc:
        raise ToolsetError(str(exc)) from None
    method = str(api.get("method") or "GET").upper()
    raw_headers = api.get("headers") or {}
    headers = {"User-Agent": USER_AGENT}
    if isinstance(raw_headers, Mapping):
        headers.update({str(k): expand(str(v), env) for k, v in raw_headers.items()})
    name = str(api.get("name") or "api")
    instruction = str(api.get("instruction") or "")
    args = api.get("args") or {}
    properties: dict[str, Any] = {}
    for key, value in (args if isinstance(args, Mapping) else {}).items():
        properties[str(key)] = dict(value) if isinstance(value, Mapping) else {"type": "string"}
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    required = api.get("required")
    if isinstance(required, list | tuple):
        parameters["required"] = [str(r) for r in required]

    async def call(arguments: Mapping[str, Any]) -> ToolResult:
        url, body = endpoint, None
        if method == "GET":
            if not all(isinstance(v, str) for v in arguments.values()):
                return error("Error calling tool: invalid arguments: GET arguments must be strings")
            url = expand(endpoint, arguments, quote=True)
        elif method == "POST":
            body = json.dumps(dict(arguments)).encode()
        sent = dict(headers)
        if body is not None:
            sent["Content-Type"] = "application/json"
        try:
            with trio.fail_after(TIMEOUT):
                async with (
                    guarded_client(policy, timeout=None) as client,
                    client.stream(method, url, headers=sent, content=body) as response,
                ):
                    data, _ = await read_limited(response)
        except trio.TooSlowError:
            return error(f"Error calling tool: request failed: timed out after {TIMEOUT:g}s")
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return error(f"Error calling tool: request failed: {exc}")
        return ToolResult(limit_output(data.decode(errors="replace")))

    spec = ToolSpec(name, instruction or f"Call the {name} API", parameters)
    annotations = ToolAnnotations(title=name or "Query API", read_only=True)
    return Toolset([FunctionTool(spec, call, annotations, "api")], instruction)
