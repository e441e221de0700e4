"""The edge's rules one by one, table-driven: Host and Origin checks, JSON content types,
storable values, field limits and query/header parameters. Pure functions: no server."""

from __future__ import annotations

import re
from typing import Any

import pytest

from greenroom.domain import check_value, parse
from greenroom.errors import (
    CrossSiteRequest,
    GreenroomError,
    HostNotAllowed,
    InvalidMessageId,
    InvalidRequest,
    UnsupportedMediaType,
)
from greenroom.transport import _bodies as b  # white-box, here and below: pure rules
from greenroom.transport._cross_site import (
    SitePolicy,
    check_json_content_type,
    check_request,
    same_origin,
)
from greenroom.transport._json import load_json
from greenroom.transport._params import (
    parse_bool,
    parse_duration,
    parse_message_id,
    parse_seq,
)

LOCAL = SitePolicy("127.0.0.1")
EVERYWHERE = SitePolicy("0.0.0.0")


@pytest.mark.parametrize(
    ("policy", "host", "allowed"),
    [
        (LOCAL, "127.0.0.1:8080", True),
        (LOCAL, "localhost:8080", True),
        (LOCAL, "LOCALHOST", True),
        (LOCAL, "[::1]:8080", True),
        (LOCAL, "evil.example:8080", False),  # DNS rebinding: a name pointed at 127.0.0.1
        (LOCAL, "127.0.0.1.nip.io", False),
        (LOCAL, "10.0.0.5:8080", False),  # an address the server does not listen on
        (SitePolicy("127.0.0.1", ("chat.internal",)), "chat.internal:8080", True),
        (SitePolicy("127.0.0.1", ("*",)), "anything.example", True),
        (SitePolicy("10.1.2.3"), "10.1.2.3:9000", True),
        (EVERYWHERE, "10.1.2.3:9000", True),  # IP literals cannot be re-pointed by DNS
        (EVERYWHERE, "[fe80::1]:9000", True),
        (EVERYWHERE, "myhost:9000", False),  # names must be listed
        (SitePolicy("::"), "192.168.1.4", True),
    ],
)
def test_host_check(policy: SitePolicy, host: str, allowed: bool) -> None:
    assert policy.host_allowed(host) is allowed


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080", True),
        ("http://localhost:8080", "localhost:8080", True),
        ("http://LOCALHOST:8080", "localhost:8080", True),
        ("http://localhost", "localhost:80", True),  # default port made explicit
        ("https://chat.example", "chat.example", True),  # TLS ends at a proxy in front
        ("http://localhost:8081", "localhost:8080", False),  # another port: another origin
        ("http://evil.example", "localhost:8080", False),
        ("null", "localhost:8080", False),  # sandboxed frames, file:// pages
        ("ftp://localhost:8080", "localhost:8080", False),
        ("http://localhost:8080/path", "localhost:8080", False),
        ("http://[::1]:8080", "[::1]:8080", True),
        # Issue 23: greenroom speaks plain HTTP; on loopback an https origin is another server.
        ("https://127.0.0.1:8080", "127.0.0.1:8080", False),
        ("https://localhost:8080", "localhost:8080", False),
        ("https://[::1]:8080", "[::1]:8080", False),
        ("https://127.0.0.1", "127.0.0.1:443", False),
    ],
)
def test_same_origin(origin: str, host: str, same: bool) -> None:
    assert same_origin(origin, host) is same


H = "localhost:8080"


@pytest.mark.parametrize(
    ("method", "headers", "websocket", "error"),
    [
        ("POST", {"host": H}, False, None),  # curl, SDKs: no Origin
        ("GET", {"host": H, "origin": "http://evil.example"}, False, None),  # CORS guards reads
        ("POST", {"host": H, "origin": "http://evil.example"}, False, CrossSiteRequest),
        ("PATCH", {"host": H, "origin": "http://evil.example"}, False, CrossSiteRequest),
        ("DELETE", {"host": H, "origin": "null"}, False, CrossSiteRequest),
        ("POST", {"host": H, "origin": "http://localhost:8080"}, False, None),  # the chat page
        ("GET", {"host": H, "origin": "http://evil.example"}, True, CrossSiteRequest),
        ("GET", {"host": H, "origin": "http://localhost:8080"}, True, None),
        ("GET", {"host": H}, True, None),  # non-browser WebSocket clients
        ("GET", {"host": "evil.example"}, False, HostNotAllowed),
        ("GET", {"host": "evil.example", "origin": "http://evil.example"}, True, HostNotAllowed),
        ("GET", {}, False, None),  # HTTP/1.0 without Host: no browser sends that
    ],
)
def test_cross_site_check(
    method: str, headers: dict[str, str], websocket: bool, error: type[Exception] | None
) -> None:
    if error is None:
        check_request(LOCAL, method, headers, websocket=websocket)
    else:
        with pytest.raises(error):
            check_request(LOCAL, method, headers, websocket=websocket)


def test_cors_origins_are_allowed_and_star_allows_any() -> None:
    headers = {"host": H, "origin": "https://app.example"}
    check_request(SitePolicy("127.0.0.1", cors_origins=("https://app.example",)), "POST", headers)
    check_request(SitePolicy("127.0.0.1", cors_origins=("*",)), "POST", headers)
    with pytest.raises(CrossSiteRequest, match=re.escape("--cors-origin https://app.example")):
        check_request(SitePolicy("127.0.0.1", cors_origins=("https://b.example",)), "POST", headers)


@pytest.mark.parametrize(
    ("content_type", "ok"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/merge-patch+json", True),
        ("text/plain", False),  # what a cross-site form or fetch sends without a preflight
        ("application/x-www-form-urlencoded", False),  # curl -d without -H
        ("multipart/form-data; boundary=x", False),
        ("", False),
        (None, False),
    ],
)
def test_json_content_type(content_type: str | None, ok: bool) -> None:
    if ok:
        check_json_content_type(content_type)
    else:
        with pytest.raises(UnsupportedMediaType):
            check_json_content_type(content_type)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (b'{"title": "\\ud800"}', "$.title"),  # a lone surrogate
        (b'{"a": ["ok", "\\udfff x"]}', "$.a[1]"),
        (b'{"\\ud800": 1}', "$ (a key)"),
        (b'{"x": 1e400}', "$.x"),  # overflows to infinity
        (b'{"x": NaN}', "$"),
        (b'{"x": -Infinity}', "$"),
    ],
)
def test_unstorable_json_is_refused_naming_the_path(raw: bytes, path: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        load_json(raw)
    assert info.value.path == path


@pytest.mark.parametrize(
    "value",
    ["\U0001f600", "\ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16"), 2**63 - 1],
)
def test_storable_values_pass(value: Any) -> None:
    check_value({"v": [value]})


def test_big_integer_literals_are_doubles_and_integer_fields_refuse_them() -> None:
    assert load_json(b'{"x": 9223372036854775808}') == {"x": 9.223372036854776e18}
    assert load_json(b'{"x": 9223372036854775807}') == {"x": 2**63 - 1}
    with pytest.raises(InvalidRequest) as info:
        parse(load_json(b'{"input_tokens": 9223372036854775808, "output_tokens": 1}'), b.TokensBody)
    assert info.value.path == "$.input_tokens"


@pytest.mark.parametrize(
    ("cls", "body", "path", "words"),
    [
        (b.TokensBody, {"input_tokens": -1, "output_tokens": 0}, "$.input_tokens", "at least 0"),
        (b.TokensBody, {"input_tokens": 1, "output_tokens": 2, "cost": -0.5}, "$.cost", "at least"),
        (b.TokensBody, {"input_tokens": 1.5, "output_tokens": 0}, "$.input_tokens", "integer"),
        (b.TitleBody, {"title": "x" * 1025}, "$.title", "at most 1024"),
        (b.SafetyPolicyBody, {"safety_policy": "yolo"}, "$.safety_policy", "expected one of"),
        (b.ResumeBody, {"confirmation": "maybe"}, "$.confirmation", "expected one of"),
        (b.QueueBody, {"messages": []}, "$.messages", "at least one"),
        (b.QueueBody, {"messages": [{}], "framing": "loud"}, "$.framing", "expected one of"),
        (b.BatchBody, {"session_ids": []}, "$.session_ids", "at least one"),
        (b.BatchBody, {"session_ids": ["x" * 257]}, "$.session_ids[0]", "at most 256"),
        (b.SummaryBody, {"summary": " \n "}, "$.summary", "blank"),
        (b.SummaryBody, {"summary": "s", "model": "a\nb"}, "$.model", "control characters"),
        (b.ForkBody, {"message_index": -1}, "$.message_index", "at least 0"),
        (b.MessageBody, {"message": None}, "$.message", "expected object, got null"),
    ],
)
def test_field_rules(cls: type[Any], body: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(body, cls)
    assert info.value.path == path
    assert words in info.value.message
    assert "typing." not in info.value.message  # no Python internals in client errors


def test_integral_numbers_are_integers() -> None:
    assert parse({"input_tokens": 3.0, "output_tokens": 0}, b.TokensBody).input_tokens == 3


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("500ms", 0.5), ("2s", 2.0), ("1m30s", 90.0), ("1h", 300.0), ("10µs", 1e-5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "query.timeout") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "2", "-1s", "1 s", "s", "1d", "abc", "1.s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_duration(text, "query.timeout")
    assert info.value.path == "query.timeout"


@pytest.mark.parametrize(
    ("text", "value"), [("true", True), ("1", True), ("T", True), ("false", False), ("0", False)]
)
def test_booleans(text: str, value: bool) -> None:
    assert parse_bool(text, "query.wait") is value


@pytest.mark.parametrize(
    ("parser", "text", "error"),
    [
        (parse_bool, "yes", InvalidRequest),
        (parse_bool, "", InvalidRequest),
        (parse_seq, "abc", InvalidRequest),
        (parse_seq, "-1", InvalidRequest),
        (parse_seq, "1" * 19, InvalidRequest),
        (parse_message_id, "99999999999999999999", InvalidMessageId),
        (parse_message_id, "1e3", InvalidMessageId),
    ],
)
def test_bad_parameters(parser: Any, text: str, error: type[GreenroomError]) -> None:
    with pytest.raises(error):
        parser(text, "query.x")
