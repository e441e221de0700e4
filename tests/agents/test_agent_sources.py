"""Agent sources: listing, lookup by key, and reloading edited files (mtimes bumped, no sleeps)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from greenroom.agents import (
    DEFAULT_SOURCE_KEY,
    AgentEntry,
    AgentSources,
    bundled_agent_path,
    load_agent_file,
)
from greenroom.errors import AgentConfigError, AgentNotFound

SINGLE = "agents:\n  root:\n    model: openai/b\n    description: Single {n}\n"
MULTI = """\
agents:
  first:
    model: openai/b
    description: The first
    commands:
      zeta: Do zeta
      alpha: {agent: second}
  second:
    model: openai/c
"""


def write(path: Path, text: str, *, bump: int = 0) -> Path:
    path.write_text(text)
    if bump:
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000_000))
    return path


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    write(tmp_path / "solo.yaml", SINGLE.format(n=1))
    write(tmp_path / "team.yml", MULTI)
    write(tmp_path / "broken.yaml", "agents: [\n")
    write(tmp_path / "notes.txt", "not an agent")
    return tmp_path


def test_list_is_sorted_describes_the_first_agent_and_skips_broken_files(agent_dir) -> None:
    sources = AgentSources.from_paths([agent_dir])
    assert sources.keys() == ["broken", "solo", "team"]
    assert sources.list() == [
        AgentEntry(name="solo", description="Single 1", multi=False),
        AgentEntry(name="team", description="The first", multi=True, commands=("alpha", "zeta")),
    ]
    assert sources.list()[1].to_json() == {
        "name": "team",
        "description": "The first",
        "multi": True,
        "commands": ["alpha", "zeta"],
    }
    assert "commands" not in sources.list()[0].to_json()


def test_get_returns_the_config_and_its_json(agent_dir) -> None:
    sources = AgentSources.from_paths([agent_dir / "team.yml", agent_dir / "solo.yaml"])
    assert list(sources.get("team").agents) == ["first", "second"]
    assert sources.get_json("solo")["agents"]["root"]["model"] == "openai/b"
    with pytest.raises(AgentNotFound):
        sources.get("nope")
    with pytest.raises(AgentNotFound):
        sources.get_json("nope")


def test_a_file_that_never_loaded_is_an_error(agent_dir) -> None:
    sources = AgentSources.from_paths([agent_dir])
    with pytest.raises(AgentConfigError, match=r"broken\.yaml:2: \(yaml\)"):
        sources.get("broken")


def test_an_edit_is_picked_up_on_the_next_access(agent_dir) -> None:
    sources = AgentSources.from_paths([agent_dir])
    first = sources.get("solo")
    assert sources.get("solo") is first  # unchanged file: not parsed again
    write(agent_dir / "solo.yaml", SINGLE.format(n=2), bump=5)
    assert sources.get("solo").agents["root"].description == "Single 2"
    assert sources.list()[0].description == "Single 2"


def test_a_broken_edit_keeps_the_last_good_version_and_logs_why(agent_dir, caplog) -> None:
    sources = AgentSources.from_paths([agent_dir])
    good = sources.get("solo")
    write(agent_dir / "solo.yaml", "agents:\n  root:\n    model: nope\n", bump=5)
    with caplog.at_level(logging.WARNING, logger="greenroom.agents"):
        assert sources.get("solo") is good
        assert sources.get("solo") is good
    warnings = [r for r in caplog.records if "last good version" in r.getMessage()]
    assert len(warnings) == 1  # logged once per edit, not once per access
    assert "solo.yaml:3: agents.root.model: unknown model 'nope'" in warnings[0].getMessage()
    write(agent_dir / "solo.yaml", SINGLE.format(n=3), bump=10)
    assert sources.get("solo").agents["root"].description == "Single 3"


def test_a_deleted_file_keeps_serving_the_last_good_version(agent_dir) -> None:
    sources = AgentSources.from_paths([agent_dir])
    good = sources.get("solo")
    (agent_dir / "solo.yaml").unlink()
    assert sources.get("solo") is good


def test_a_broken_file_that_gets_fixed_appears_in_the_list(agent_dir) -> None:
    sources = AgentSources.from_paths([agent_dir])
    assert "broken" not in [e.name for e in sources.list()]
    write(agent_dir / "broken.yaml", SINGLE.format(n=9), bump=5)
    assert "broken" in [e.name for e in sources.list()]


def test_from_paths_rejects_missing_paths_and_clashing_keys(tmp_path) -> None:
    with pytest.raises(AgentConfigError, match="no such agent file"):
        AgentSources.from_paths([tmp_path / "ghost.yaml"])
    (tmp_path / "sub").mkdir()
    write(tmp_path / "a.yaml", SINGLE.format(n=1))
    write(tmp_path / "sub" / "a.yml", SINGLE.format(n=2))
    with pytest.raises(AgentConfigError, match="key 'a' is also used"):
        AgentSources.from_paths([tmp_path / "a.yaml", tmp_path / "sub"])


def test_bundled_default_agent() -> None:
    sources = AgentSources.bundled()
    assert sources.keys() == [DEFAULT_SOURCE_KEY] == ["default"]
    config = sources.get("default")
    root = config.agents["root"]
    assert root.model == "auto"
    assert root.description and root.instruction
    assert [t.type for t in root.toolsets] == ["think"]
    assert load_agent_file(bundled_agent_path()).agents.keys() == config.agents.keys()
    assert sources.list()[0].name == "default"
