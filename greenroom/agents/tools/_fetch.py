"""``fetch``: read web pages (spec §2.7). Only http/https; robots.txt is honoured.

Each call reads at most 1 MiB of each body within the toolset's ``timeout`` (default 30 s,
the call's ``timeout`` argument overrides it up to 300 s). HTML becomes Markdown
(``markdownify``) or plain text (BeautifulSoup) as asked. The HTTP status is not an error.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import httpx
import trio
from bs4 import BeautifulSoup
from markdownify import markdownify
from protego import Protego

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import FunctionTool, ToolAnnotations, ToolContext, ToolResult, ToolsetError, error
from ._egress import PUBLIC_ONLY, EgressPolicy, guarded_client, toolset_policy
from ._http import ROBOTS_AGENT, USER_AGENT, BadURL, check_url, read_limited
from ._registry import Toolset, register

ROBOTS_LIMIT = 64 * 1024
ACCEPT = {
    "markdown": "text/markdown;q=1.0, text/plain;q=0.9, text/html;q=0.7, */*;q=0.1",
    "html": "text/html;q=1.0, text/plain;q=0.8, */*;q=0.1",
    "text": "text/plain;q=1.0,  text/markdown;q=0.9, text/html;q=0.8, */*;q=0.1",
}
SPEC = ToolSpec(
    "fetch",
    "Fetch content from one or more HTTP/HTTPS URLs and return it as text, markdown or html.",
    {
        "type": "object",
        "properties": {
            "urls": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                     "description": "The URLs to fetch"},
            "format": {"type": "string", "enum": ["text", "markdown", "html"],
                       "description": "The format to return the content in"},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 300,
                        "description": "Request timeout in seconds"},
        },
        "required": ["urls", "format"],
    },
)  # fmt: skip
INSTRUCTIONS = (
    "## Fetching web pages\n\n"
    "Use fetch to read web pages; ask for markdown to read a page, html to inspect markup."
)


class Blocked(Exception):
    pass


def convert(body: bytes, content_type: str, fmt: str) -> str:
    text = body.decode(errors="replace")
    if "text/html" not in content_type:
        return text
    if fmt == "markdown":
        return str(markdownify(text, heading_style="ATX")).strip()
    if fmt == "text":
        soup = BeautifulSoup(text, "html.parser")
        for tag in soup(["script", "style"]):
            tag.decompose()
        text = soup.get_text(separator="\n")
        return "\n".join(line.strip() for line in text.splitlines() if line.strip())
    return text


class Fetcher:
    def __init__(self, timeout: float, policy: EgressPolicy = PUBLIC_ONLY) -> None:
        self.timeout = timeout
        self.policy = policy

    async def _allowed(self, client: httpx.AsyncClient, url: str, robots: dict[str, Any]) -> None:
        parts = urllib.parse.urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in robots:
            robots[origin] = await self._robots(client, origin)
        rules = robots[origin]
        if rules is False:
            raise Blocked("URL blocked by robots.txt")
        if rules is not None and not rules.can_fetch(url, ROBOTS_AGENT):
            raise Blocked("URL blocked by robots.txt")

    async def _robots(self, client: httpx.AsyncClient, origin: str) -> Any:
        """Parsed rules; None = everything allowed; False = the site is blocked."""
        try:
            async with client.stream("GET", origin + "/robots.txt") as response:
                if response.status_code == 404:
                    return None
                if response.status_code != 200:
                    return False
                body, _ = await read_limited(response, ROBOTS_LIMIT)
        except httpx.HTTPError:
            return None  # unreachable: allowed, as upstream
        try:
            return Protego.parse(body.decode(errors="replace"))
        except Exception:
            return False

    async def one(
        self, client: httpx.AsyncClient, url: str, fmt: str, robots: dict[str, Any]
    ) -> dict[str, Any]:
        check_url(url)
        await self._allowed(client, url, robots)
        headers = {"Accept": ACCEPT.get(fmt, "text/plain;q=1.0, */*;q=0.1")}
        async with client.stream("GET", url, headers=headers) as response:
            body, _ = await read_limited(response)
            content_type = response.headers.get("content-type", "")
            return {
                "url": url,
                "statusCode": response.status_code,
                "status": f"{response.status_code} {response.reason_phrase}",
                "contentType": content_type,
                "contentLength": len(body),
                "body": convert(body, content_type, fmt),
            }

    async def fetch(self, args: Mapping[str, Any]) -> ToolResult:
        urls = [str(u) for u in args.get("urls") or ()]
        if not urls:
            return error("Error calling tool: at least one URL is required")
        fmt = str(args.get("format", "text"))
        timeout = args.get("timeout")
        seconds = (
            float(timeout) if isinstance(timeout, int) and 0 < timeout <= 300 else self.timeout
        )
        results: list[dict[str, Any]] = []
        robots: dict[str, Any] = {}
        async with guarded_client(
            self.policy, headers={"User-Agent": USER_AGENT}, follow_redirects=True, timeout=None
        ) as client:
            for url in urls:
                try:
                    with trio.fail_after(seconds):
                        results.append(await self.one(client, url, fmt, robots))
                except trio.TooSlowError:
                    results.append({"url": url, "error": f"timed out after {seconds:g}s"})
                except (BadURL, Blocked) as exc:
                    results.append({"url": url, "error": str(exc)})
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    results.append({"url": url, "error": str(exc) or type(exc).__name__})
        if len(results) == 1:
            only = results[0]
            if "error" in only:
                return error(f"Error fetching {only['url']}: {only['error']}")
            return ToolResult(
                f"Successfully fetched {only['url']} (Status: {only['statusCode']}, "
                f"Length: {only['contentLength']} bytes):\n\n{only['body']}"
            )
        for result in results:
            if "error" in result:
                result.setdefault("statusCode", 0)
                result.setdefault("status", "")
                result.setdefault("contentLength", 0)
        return ToolResult(json.dumps(results))


@register("fetch")
def fetch_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    timeout = config.options.get("timeout", 30)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        raise ToolsetError("timeout must be a whole number of seconds, at least 1")
    try:
        policy = toolset_policy(config.options, ctx.egress)
    except ValueError as exc:
        raise ToolsetError(str(exc)) from None
    fetcher = Fetcher(float(timeout), policy)
    tool = FunctionTool(SPEC, fetcher.fetch, ToolAnnotations(title="Fetch URLs"), "fetch")
    return Toolset([tool], INSTRUCTIONS)
