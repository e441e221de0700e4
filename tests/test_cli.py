"""``greenroom serve`` options reach the server's configuration (the server itself is not run)."""

from __future__ import annotations

import pytest

import greenroom.serve
from greenroom.cli import main
from greenroom.serve import ServeConfig


@pytest.mark.parametrize(("flags", "titles"), [([], True), (["--no-titles"], False)])
def test_no_titles_turns_titles_off(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], titles: bool
) -> None:
    seen: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    assert main(["serve", "--port", "0", *flags, "--log-level", "warning"]) == 0
    (cfg,) = seen
    assert cfg.titles is titles


@pytest.mark.parametrize(
    ("flags", "env"),
    [(["--auth-token", ""], None), ([], ""), ([], "   "), (["--auth-token", " "], "good")],
)
def test_a_blank_token_exits_2_without_starting(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    env: str | None,
) -> None:
    """Issue 23: an empty --auth-token or GREENROOM_AUTH_TOKEN used to start without auth."""
    started: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        started.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    if env is None:
        monkeypatch.delenv("GREENROOM_AUTH_TOKEN", raising=False)
    else:
        monkeypatch.setenv("GREENROOM_AUTH_TOKEN", env)
    assert main(["serve", "--port", "0", *flags, "--log-level", "warning"]) == 2
    assert started == []
    assert "blank" in capsys.readouterr().err


def test_no_token_at_all_still_serves_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        started.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    monkeypatch.delenv("GREENROOM_AUTH_TOKEN", raising=False)
    assert main(["serve", "--port", "0", "--log-level", "warning"]) == 0
    assert started[0].auth_token == ""
    monkeypatch.setenv("GREENROOM_AUTH_TOKEN", "t0k")
    assert main(["serve", "--port", "0", "--log-level", "warning"]) == 0
    assert started[1].auth_token == "t0k"
