"""The chat page's files at ``/`` and ``/ui/<name>``: served from package data with a strict
Content-Security-Policy and nosniff, without a token, and small."""

from __future__ import annotations

import re
from typing import cast

import pytest
from quart.testing import QuartClient as Client

from greenroom.transport import AppConfig
from greenroom.web import static_files
from tests.transport.support import Env

PAGE_BUDGET = 100 * 1024  # bytes, uncompressed: the whole page


@pytest.fixture
def client(env: Env) -> Client:
    return cast(Client, env.app.test_client())


async def test_index_is_the_chat_page(client: Client) -> None:
    r = await client.get("/")
    assert r.status_code == 200
    assert r.content_type.startswith("text/html")
    body = await r.get_data(as_text=True)
    assert isinstance(body, str)
    assert '<script type="module" src="/ui/app.js"></script>' in body
    csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp
    assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("name", sorted(static_files()))
async def test_every_file_is_served_with_the_headers(client: Client, name: str) -> None:
    r = await client.get(f"/ui/{name}")
    assert r.status_code == 200
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    expected = {"js": "text/javascript", "css": "text/css", "html": "text/html"}
    assert r.content_type.startswith(expected[name.rpartition(".")[2]])


async def test_unknown_file_is_404(client: Client) -> None:
    r = await client.get("/ui/nope.js")
    assert r.status_code == 404
    assert (await r.get_json())["code"] == "route_not_found"


@pytest.mark.parametrize("app_config", [AppConfig(auth_token="s3cret")])
async def test_the_page_needs_no_token_but_the_api_does(client: Client) -> None:
    assert (await client.get("/")).status_code == 200
    assert (await client.get("/ui/app.js")).status_code == 200
    assert (await client.get("/api/sessions")).status_code == 401


def test_no_inline_script_or_style_and_no_html_sinks() -> None:
    files = {name: data.decode() for name, (data, _) in static_files().items()}
    html = files["index.html"]
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "inline script"
    assert "<style" not in html and " style=" not in html, "inline style"
    assert not re.search(r"\son[a-z]+=", html), "inline event handler"
    for name, text in files.items():
        if name.endswith(".js"):
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
                assert sink not in text, f"{name} uses {sink}"
            assert not re.search(r"https?://", text), f"{name} names another origin"


def test_page_weight_is_under_budget() -> None:
    total = sum(len(data) for data, _ in static_files().values())
    assert total < PAGE_BUDGET, f"the page weighs {total} bytes"
