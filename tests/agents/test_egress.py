# ruff: noqa: E501  (address tables read best one row per line)
"""The egress policy of network tools (issue 23): nothing inward unless the operator allows it.

Address checks as a table and as properties (every spelling of an IPv4 address inside IPv6
gets the IPv4 address's verdict); then ``fetch``, ``api`` and ``openapi`` against a real
loopback server: refused by default in every spelling of the address, with no request reaching
the server, allowed by ``egress`` (the server's ``--allow-private-network``) or the toolset's
``allow_private_network``, and checked again on every redirect hop. Real sockets: real clock,
every wait bounded.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, strategies as st

from greenroom.agents import ToolContext, ToolsetConfig
from greenroom.agents.tools import build_tools
from greenroom.agents.tools._egress import EgressPolicy, parse_networks

pytestmark = pytest.mark.slow

STRICT = EgressPolicy()
LOOPBACK_ONE = EgressPolicy(parse_networks(["127.0.0.1/32"]))

REFUSED = [
    ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("::1", "loopback"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("fd00::1", "private"), ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("100.64.0.1", "not a public"), ("192.0.2.1", "private"), ("240.0.0.1", "private"), ("198.18.0.1", "private"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::7f00:1", "loopback"), ("2002:7f00:1::", "loopback"), ("2002:a00:1::", "private"),
]  # fmt: skip
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize(("address", "kind"), REFUSED)
def test_inward_addresses_are_refused(address: str, kind: str) -> None:
    why = STRICT.refusal(address)
    assert why.startswith("refused by the egress policy") and kind in why, why


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert STRICT.refusal(address) == ""


def test_allowed_networks_open_exactly_themselves() -> None:
    assert LOOPBACK_ONE.refusal("127.0.0.1") == ""
    assert LOOPBACK_ONE.refusal("::ffff:127.0.0.1") == ""  # the same address, mapped
    assert LOOPBACK_ONE.refusal("127.0.0.2") != ""
    assert LOOPBACK_ONE.refusal("::1") != ""
    with pytest.raises(ValueError, match="not an IP network"):
        parse_networks(["10.0.0.0/33"])


@given(st.integers(0, 2**32 - 1))
def test_ipv4_inside_ipv6_gets_the_ipv4_verdict(value: int) -> None:
    v4 = ipaddress.IPv4Address(value)
    refused = STRICT.refusal(str(v4)) != ""
    mapped = f"::ffff:{v4}"
    nat64 = str(ipaddress.IPv6Address((0x64FF9B << 96) | value))
    sixtofour = str(ipaddress.IPv6Address((0x2002 << 112) | (value << 80)))
    for form in (mapped, nat64, sixtofour):
        assert (STRICT.refusal(form) != "") is refused, form


# --- against a real loopback server --------------------------------------------------------


@asynccontextmanager
async def web(host: str, seen: list[str], redirect: str = "") -> AsyncIterator[int]:
    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            path = data.split(b" ")[1].decode()
            seen.append(path)
            if path == "/robots.txt":
                head, body = "404 X", b""
            elif redirect and path == "/go":
                head, body = f"302 X\r\nLocation: {redirect}", b""
            else:
                head, body = "200 X\r\nContent-Type: application/json", b'{"ok": true}'
            answer = f"HTTP/1.1 {head}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            await stream.send_all(answer.encode() + body)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host=host))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


def toolset(kind: str, root: Path, egress: EgressPolicy = STRICT, **options: Any) -> Any:
    ctx = ToolContext(working_dir=root, env={"PATH": os.environ.get("PATH", "/bin")}, egress=egress)
    return build_tools([ToolsetConfig(kind, options)], ctx)


async def fetch(tools: Any, url: str) -> Any:
    with trio.fail_after(20):
        return await tools.tools["fetch"].call({"urls": [url], "format": "text"})


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f000001",
        "0x7f.0.0.1",
        "127.1",
        "localhost",
        "[::ffff:127.0.0.1]",
    ],
)
async def test_fetch_of_loopback_is_refused_in_every_spelling(tmp_path: Path, host: str) -> None:
    seen: list[str] = []
    async with web("127.0.0.1", seen) as port:
        result = await fetch(toolset("fetch", tmp_path), f"http://{host}:{port}/secret")
    assert result.is_error
    assert seen == []  # not even robots.txt reached the server
    if "Invalid IPv4 address" not in result.output:  # httpx itself rejects some spellings
        assert "refused by the egress policy" in result.output and "loopback" in result.output


async def test_ipv6_loopback_is_refused(tmp_path: Path) -> None:
    result = await fetch(toolset("fetch", tmp_path), "http://[::1]:9/x")
    assert "refused by the egress policy: ::1 is a loopback address" in result.output


async def test_an_allowed_network_is_reached(tmp_path: Path) -> None:
    seen: list[str] = []
    async with web("127.0.0.1", seen) as port:
        by_server = await fetch(
            toolset("fetch", tmp_path, LOOPBACK_ONE), f"http://127.0.0.1:{port}/a"
        )
        by_file = await fetch(
            toolset("fetch", tmp_path, allow_private_network=["127.0.0.0/30"]),
            f"http://127.0.0.1:{port}/b",
        )
    assert not by_server.is_error and not by_file.is_error, (by_server, by_file)
    assert "/a" in seen and "/b" in seen


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.2:{port}/inner",
        "http://2130706434:{port}/inner",
        "http://[::ffff:127.0.0.2]:{port}/inner",
    ],
)
async def test_every_redirect_hop_is_checked(tmp_path: Path, target: str) -> None:
    outer: list[str] = []
    inner: list[str] = []
    async with web("127.0.0.2", inner) as inner_port:
        location = target.format(port=inner_port)
        async with web("127.0.0.1", outer, redirect=location) as port:
            result = await fetch(
                toolset("fetch", tmp_path, LOOPBACK_ONE), f"http://127.0.0.1:{port}/go"
            )
    assert "/go" in outer  # the allowed first hop was made
    assert inner == []  # the redirect's target never was
    assert "refused by the egress policy: " in result.output and "127.0.0.2" in result.output


async def test_api_and_openapi_are_refused_too(tmp_path: Path) -> None:
    seen: list[str] = []
    async with web("127.0.0.1", seen) as port:
        url = f"http://127.0.0.1:{port}"
        api = toolset(
            "api", tmp_path, api_config={"name": "get", "endpoint": url + "/x", "method": "GET"}
        )
        with trio.fail_after(20):
            result = await api.tools["get"].call({})
        assert result.is_error and "refused by the egress policy" in result.output
        openapi = toolset("openapi", tmp_path, url=url + "/spec.json")
        with trio.fail_after(20):
            problems = await openapi.start()
        assert problems and "refused by the egress policy" in problems[0]
        spec = {"openapi": "3.0.0", "info": {"title": "T"}, "servers": [{"url": url}],
                "paths": {"/x": {"get": {"operationId": "getX"}}}}  # fmt: skip
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        local = toolset("openapi", tmp_path, url="spec.json")
        with trio.fail_after(20):
            assert await local.start() == []
            result = await local.tools["getX"].call({})
        assert result.is_error and "refused by the egress policy" in result.output
    assert seen == []


def test_a_bad_toolset_network_is_a_toolset_error(tmp_path: Path) -> None:
    tools = toolset("fetch", tmp_path, allow_private_network=["nope"])
    assert tools.warnings == [
        "toolset fetch failed: allow_private_network: 'nope' is not an IP network (CIDR)"
    ]
