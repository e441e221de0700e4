"""``greenroom serve`` options reach the server's configuration (the server itself is not run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_serve_reports_every_bad_agent_file_once(tmp_path: Path) -> None:
    """Issue 22: each fault printed once (not logged and printed), and every bad file of a
    directory reported, not only the first."""
    (tmp_path / "a.yaml").write_text(
        'version: "2"\nagents:\n  root:\n    model: echo/echo\n    bogus_key: 1\n'
    )
    (tmp_path / "b.yaml").write_text('version: "2"\nagents:\n  root:\n    instruction: [\n')
    (tmp_path / "c.yaml").write_text(
        'version: "2"\nagents:\n  root:\n    model: echo/echo\n    instruction: fine\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "greenroom.cli", "serve", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    err = done.stderr
    assert err.count("a.yaml:5: agents.root.bogus_key: unknown key") == 1, err
    assert err.count("b.yaml:") == 1, err
    assert "c.yaml" not in err
