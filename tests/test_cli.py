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
