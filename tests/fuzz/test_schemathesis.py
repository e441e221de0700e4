"""Schemathesis, all phases and checks, against a live ``greenroom serve`` (real clock): the
OpenAPI document and the server agree both ways, and no generated request gets a 5xx."""

from __future__ import annotations

import pytest

from tests.fuzz.run import live_server, run_one_turn, schemathesis


@pytest.mark.slow
def test_schemathesis_finds_nothing() -> None:
    with live_server() as url:
        run_one_turn(url)
        code, output = schemathesis(url, examples=10, deterministic=True, seed=None)
    assert code == 0, output[-20_000:]
    assert "No issues found" in output, output[-5_000:]
