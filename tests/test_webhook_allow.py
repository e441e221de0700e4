"""The webhook allow-list (issue 25): a target passes only when its parsed, normalised URL is
under an allowed prefix — scheme, host and port equal, and the path under the prefix's path
at a segment boundary. Written adversarially first: every case here is a way a raw string
prefix match would let a request reach another host or path (SSRF by webhook)."""

from __future__ import annotations

import pytest

from greenroom.domain import check_webhook, parse_webhook_allow
from greenroom.errors import ConfigError, InvalidRequest

ALLOW = parse_webhook_allow(("http://allowed.example/hooks/", "https://receiver.test:8443/in"))


@pytest.mark.parametrize(
    "url",
    [
        # another host that merely starts with the allowed one
        "http://allowed.example.evil/hooks/x",
        "http://allowed.example.evil.com/hooks/",
        # userinfo: the host is evil, "allowed.example" is a user name
        "http://allowed.example@evil/hooks/x",
        "http://allowed.example:80@evil/hooks/",
        "http://user:pw@allowed.example/hooks/x",
        # the prefix's path is a segment, not a string prefix
        "http://allowed.example/hooksevil",
        "http://allowed.example/hooks",  # the prefix ends with /: its folder only
        # dot segments and their encodings climb out of the allowed path
        "http://allowed.example/hooks/../admin",
        "http://allowed.example/hooks/%2e%2e/admin",
        "http://allowed.example/hooks/.%2E/admin",
        "http://allowed.example/hooks/..%2fadmin",
        "http://allowed.example/hooks/%2F..%2Fadmin",
        "http://allowed.example/hooks\\..\\admin",
        # another scheme or port than the prefix
        "https://allowed.example/hooks/x",
        "http://allowed.example:8080/hooks/x",
        "https://receiver.test/in/x",
        "https://receiver.test:8444/in",
        "ftp://allowed.example/hooks/x",
        "file:///etc/passwd",
        # control characters, spaces and other tricks in the host
        "http://allowed.example%2eevil/hooks/x",
        "http://allowed.example\t/hooks/x",
        "http://allowed.example /hooks/x",
        "http://[::1]/hooks/x",
        "http://127.0.0.1/hooks/x",
        "http:///hooks/x",
        "//allowed.example/hooks/x",
        "allowed.example/hooks/x",
        "",
        "http://allowed.example/hooks/" + "a" * 3000,
    ],
)
def test_targets_outside_the_allow_list_are_refused_naming_webhook(url: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_webhook(url, ALLOW)
    assert caught.value.path == "$.webhook"
    assert "webhook" in caught.value.message


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("http://allowed.example/hooks/", "http://allowed.example/hooks/"),
        ("http://allowed.example/hooks/run?x=1", "http://allowed.example/hooks/run?x=1"),
        ("HTTP://Allowed.Example:80/hooks/a/b", "http://allowed.example/hooks/a/b"),
        ("http://allowed.example./hooks/a", "http://allowed.example/hooks/a"),
        ("http://allowed.example/hooks/a#frag", "http://allowed.example/hooks/a"),
        ("https://receiver.test:8443/in", "https://receiver.test:8443/in"),
        ("https://receiver.test:8443/in/deeper", "https://receiver.test:8443/in/deeper"),
    ],
)
def test_targets_under_an_allowed_prefix_pass_normalised(url: str, normalised: str) -> None:
    assert check_webhook(url, ALLOW) == normalised


def test_an_empty_allow_list_refuses_every_webhook() -> None:
    with pytest.raises(InvalidRequest, match="--webhook-allow"):
        check_webhook("http://allowed.example/hooks/x", ())


def test_a_prefix_path_without_a_slash_matches_that_path_and_below_only() -> None:
    allow = parse_webhook_allow(("https://receiver.test:8443/in",))
    assert check_webhook("https://receiver.test:8443/in/x", allow)
    with pytest.raises(InvalidRequest):
        check_webhook("https://receiver.test:8443/inside", allow)


@pytest.mark.parametrize(
    "prefix",
    [
        "allowed.example/hooks",  # no scheme
        "ftp://allowed.example/",
        "http://user@allowed.example/",
        "http:///x",
        "http://allowed.example/a/../b",
        "http://allowed.example/?q=1",
    ],
)
def test_unusable_allow_prefixes_are_a_config_error(prefix: str) -> None:
    with pytest.raises(ConfigError, match="--webhook-allow"):
        parse_webhook_allow((prefix,))
