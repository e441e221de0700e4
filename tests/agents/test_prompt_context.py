"""Prompt context: environment info, prompt files, skills, the description parameter and the
welcome message (issue 20, item 6), as docker-agent defines them."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from greenroom.agents import AgentSources, LocalRuntimeFactory, parse_agent_file
from greenroom.agents._config import agent_file_to_json
from greenroom.agents._environment import environment_info, read_prompt_files
from greenroom.agents.tools import ToolContext, default_tools_for
from greenroom.agents.tools._skills import discover
from greenroom.domain import AgentInfo, ErrorEvent, Session, ToolCallResponse
from greenroom.errors import AgentConfigError

from .fake_openai import FakeOpenAI, text_reply
from .fake_sse import FakeSSEServer, Reply
from .loop_support import FakeIO, FakeProvider, call, make_runtime, start, text, tool_step

LIMIT = 15  # seconds (real clock)
TODAY = dt.date(2026, 3, 4)


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "HOME": str(cwd)}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


def agent_yaml(extra: str) -> str:
    lines = [
        "agents:",
        "  root:",
        "    model: openai/main",
        "    instruction: Be brief.",
        "    welcome_message: Hello there!",
    ]
    lines += [f"    {line}" for line in extra.strip().splitlines()]
    return "\n".join(lines) + "\n"


# --- the keys load ---------------------------------------------------------------------------


def test_the_keys_load_without_warnings_and_show_in_the_json() -> None:
    config = parse_agent_file(
        agent_yaml(
            "add_environment_info: true\n"
            "add_prompt_files: [AGENTS.md, CLAUDE.md]\n"
            "skills: true\n"
            "add_description_parameter: true\n"
        ),
        "a.yaml",
    )
    agent = config.agent()
    assert agent.add_environment_info and agent.add_description_parameter
    assert agent.add_prompt_files == ("AGENTS.md", "CLAUDE.md")
    assert agent.skills == ("local",)
    assert config.warnings == ()
    shown = agent_file_to_json(config)["agents"]["root"]
    assert shown["add_prompt_files"] == ["AGENTS.md", "CLAUDE.md"]
    assert shown["skills"] == ["local"] and shown["welcome_message"] == "Hello there!"


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("add_environment_info: yes please", "6: agents.root.add_environment_info"),
        ("add_prompt_files: AGENTS.md", "6: agents.root.add_prompt_files"),
        ("skills: 3", "6: agents.root.skills"),
    ],
)
def test_bad_values_are_errors_with_their_line(extra: str, where: str) -> None:
    with pytest.raises(AgentConfigError) as caught:
        parse_agent_file(agent_yaml(extra), "a.yaml")
    assert any(p.startswith(f"a.yaml:{where}:") for p in caught.value.problems), caught.value


# --- environment info --------------------------------------------------------------------------


async def test_environment_info_outside_a_repository(tmp_path: Path) -> None:
    text = await environment_info(tmp_path, TODAY)
    assert f"Working directory: {tmp_path}" in text
    assert "Is directory a git repo: No" in text
    assert "Date: 2026-03-04" in text and "Operating System: " in text
    assert "Git branch" not in text


async def test_environment_info_names_the_branch_and_the_changes(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "feature-x")
    (tmp_path / "a.txt").write_text("a")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    inner = tmp_path / "sub"
    inner.mkdir()
    assert "Git status: clean" in await environment_info(inner, TODAY)
    (tmp_path / "new.txt").write_text("n")
    text = await environment_info(inner, TODAY)
    assert "Is directory a git repo: Yes" in text
    assert "Git branch: feature-x" in text
    assert "?? new.txt" in text


# --- prompt files ------------------------------------------------------------------------------


def test_prompt_files_are_found_upward_then_in_the_home_directory(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    home.mkdir()
    (project / "AGENTS.md").write_text("project rules")
    (project / "a" / "AGENTS.md").write_text("closer rules")
    (home / "AGENTS.md").write_text("my rules")
    (home / "CLAUDE.md").write_text("home only")
    found = read_prompt_files(deep, ["AGENTS.md", "CLAUDE.md", "MISSING.md"], home=home)
    assert found == ["closer rules", "my rules", "home only"]
    # The home directory's file is not added twice when the search finds it first.
    assert read_prompt_files(home, ["AGENTS.md"], home=home) == ["my rules"]


# --- the request the model gets -----------------------------------------------------------------


async def test_the_system_prompt_carries_the_working_directory_and_prompt_files(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "AGENTS.md").write_text("Always answer in French.")
    agent_file = tmp_path / "ctx.yaml"
    agent_file.write_text(
        agent_yaml("add_environment_info: true\nadd_prompt_files: [AGENTS.md]\nadd_date: true")
    )
    server = await nursery.start(FakeOpenAI().serve)
    server.script(text_reply("bonjour"))
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test", "HOME": str(tmp_path)}
    factory = LocalRuntimeFactory(AgentSources.from_paths([agent_file]), env=env)
    session = Session.new(working_dir=str(work))
    built = await factory.build("ctx", "root", session)
    io = start(FakeIO(session), "hi")
    with trio.fail_after(LIMIT):
        await built.runtime.run_stream(io)
    await built.runtime.aclose()
    server.stop()
    assert io.of(ErrorEvent) == []
    sent = server.requests[-1].json["messages"]
    assert sent[0]["role"] == "system"
    system = sent[0]["content"]
    assert system.startswith("Be brief.")
    assert f"Working directory: {work}" in system
    assert "Is directory a git repo: No" in system
    assert system.index("Today's date:") < system.index("<env>")
    assert system.endswith("Always answer in French.")
    info = io.of(AgentInfo)[0]
    assert info.welcome_message == "Hello there!"


async def test_an_agent_without_the_keys_gets_no_environment() -> None:
    provider = FakeProvider(text("ok"))
    runtime = make_runtime(provider, agent_yaml("add_date: false"))
    await runtime.run_stream(start(FakeIO(), "hi"))
    system = provider.requests[0].messages[0].content
    assert system == "Be brief."


# --- skills ----------------------------------------------------------------------------------


def skill(directory: Path, name: str, description: str = "does things", body: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "SKILL.md"
    path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body or name}\n")
    return path


def test_skills_are_discovered_where_docker_agent_looks(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo"
    work = repo / "pkg" / "mod"
    work.mkdir(parents=True)
    (repo / ".git").mkdir()
    skill(home / ".codex" / "skills" / "deep" / "nested" / "codex-one", "codex-one")
    skill(home / ".claude" / "skills" / "shared", "shared", "from home claude")
    skill(home / ".claude" / "skills" / "a" / "too-deep", "too-deep")  # flat: not found
    skill(home / ".agents" / "skills" / "x" / "agents-one", "agents-one")
    skill(repo / ".agents" / "skills" / "shared", "shared", "from the repo root")
    skill(work / ".agents" / "skills" / "shared", "shared", "from the working directory")
    skill(work / ".claude" / "skills" / "local-claude", "local-claude")
    skill(work / ".agents" / "skills" / ".hidden", "hidden")
    (work / ".agents" / "skills" / "nameless").mkdir()
    (work / ".agents" / "skills" / "nameless" / "SKILL.md").write_text("---\ndescription: x\n---\n")
    found = {s.name: s.description for s in discover(work, home)}
    assert found == {
        "agents-one": "does things",
        "codex-one": "does things",
        "local-claude": "does things",
        "shared": "from the working directory",
    }
    # Outside a repository only the working directory's .agents/skills count.
    outside = tmp_path / "plain"
    skill(outside / ".agents" / "skills" / "p", "p")
    assert [s.name for s in discover(outside, tmp_path / "none")] == ["p"]


async def test_read_skill_and_read_skill_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    base = work / ".agents" / "skills" / "pdf"
    skill(base, "pdf", "Fill PDF forms", body="Use forms.md")
    (base / "references").mkdir()
    (base / "references" / "forms.md").write_text("FORM GUIDE")
    (tmp_path / "secret.txt").write_text("nope")
    config = parse_agent_file(agent_yaml("skills: [local]"), "a.yaml")
    ctx = ToolContext(working_dir=work, env={"HOME": str(tmp_path / "nohome")})
    tools = default_tools_for(config.agent(), ctx)
    assert set(tools.tools) == {"read_skill", "read_skill_file"}
    text = "\n".join(tools.instructions)
    assert "<name>pdf</name>" in text and "<files>references/forms.md</files>" in text
    read = tools.tools["read_skill"]
    assert "Use forms.md" in (await read.call({"name": "pdf"})).output
    assert (await read.call({"name": "nope"})).is_error
    read_file = tools.tools["read_skill_file"]
    ok = await read_file.call({"skill_name": "pdf", "path": "references/forms.md"})
    assert ok.output == "FORM GUIDE"
    escaped = await read_file.call({"skill_name": "pdf", "path": "../../../secret.txt"})
    assert escaped.is_error and "nope" not in escaped.output
    absolute = await read_file.call({"skill_name": "pdf", "path": str(tmp_path / "secret.txt")})
    assert absolute.is_error


async def test_the_model_reads_a_skill_in_a_turn(tmp_path: Path) -> None:
    work = tmp_path / "work"
    skill(work / ".agents" / "skills" / "greet", "greet", "Greets", body="Say hi twice")
    provider = FakeProvider(tool_step(call("read_skill", {"name": "greet"})), text("hi hi"))
    runtime = make_runtime(
        provider,
        agent_yaml("skills: true"),
        tool_context=ToolContext(working_dir=work, env={"HOME": str(tmp_path)}),
    )
    io = start(FakeIO(), "greet me")
    await runtime.run_stream(io)
    assert "<name>greet</name>" in provider.requests[0].messages[0].content
    assert "Say hi twice" in io.of(ToolCallResponse)[0].response


def test_no_skill_found_means_no_skill_tools(tmp_path: Path) -> None:
    config = parse_agent_file(agent_yaml("skills: true"), "a.yaml")
    ctx = ToolContext(working_dir=tmp_path, env={"HOME": str(tmp_path)})
    assert default_tools_for(config.agent(), ctx).tools == {}


# --- the description parameter ------------------------------------------------------------------


async def test_the_description_parameter_is_offered_and_kept_from_the_tool(
    tmp_path: Path,
) -> None:
    yaml = agent_yaml(
        "add_description_parameter: true\ntoolsets:\n  - type: filesystem\n  - type: think"
    )
    config = parse_agent_file(yaml, "a.yaml")
    ctx = ToolContext(working_dir=tmp_path)
    tools = default_tools_for(config.agent(), ctx)
    params = tools.tools["write_file"].spec.parameters
    assert params["properties"]["description"]["type"] == "string"
    assert "description" not in params.get("required", [])
    assert "description" not in tools.tools["read_file"].spec.parameters["properties"]
    assert "description" not in tools.tools["think"].spec.parameters["properties"]
    bare = parse_agent_file(agent_yaml("toolsets: [{type: filesystem}]"), "b")
    plain = default_tools_for(bare.agent(), ctx)
    assert "description" not in plain.tools["write_file"].spec.parameters["properties"]
    # Through the loop: the closed schema accepts it, and the tool never sees it.
    (tmp_path / "seen.txt").write_text("x")
    listing = call("list_directory", {"path": ".", "description": "Looking around"})
    provider = FakeProvider(tool_step(listing), text("done"))
    runtime = make_runtime(provider, yaml, tool_context=ctx)
    io = start(FakeIO(), "look")
    await runtime.run_stream(io)
    sent = [t.parameters for t in provider.requests[0].tools if t.name == "list_directory"]
    assert "description" in sent[0]["properties"]
    response = io.of(ToolCallResponse)[0].response
    assert "seen.txt" in response and "invalid arguments" not in response
    # Without the key the same call fails the tool's closed schema.
    provider = FakeProvider(tool_step(listing), text("done"))
    runtime = make_runtime(provider, agent_yaml("toolsets: [{type: filesystem}]"), tool_context=ctx)
    io = start(FakeIO(), "look")
    await runtime.run_stream(io)
    assert "invalid arguments" in io.of(ToolCallResponse)[0].response


async def test_welcome_message_is_on_every_agent_info() -> None:
    provider = FakeProvider(text("ok"))
    runtime = make_runtime(provider, agent_yaml("add_date: false"))
    io = start(FakeIO(), "hi")
    await runtime.run_stream(io)
    assert [e.welcome_message for e in io.of(AgentInfo)] == ["Hello there!"]


# --- remote skills ---------------------------------------------------------------------------


def _raw(body: str, status: int = 200) -> Reply:
    if status != 200:
        return Reply(status=status, body={"error": "nope"})
    return Reply(events=(body.encode(),), content_type="application/json")


async def test_remote_skills_are_read_per_the_well_known_index(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    index = {
        "skills": [
            {"name": "pdf", "description": "Fill PDF forms", "files": ["SKILL.md", "ref/forms.md"]},
            {"name": "evil", "description": "Escapes", "files": ["../../etc/passwd", "SKILL.md"]},
            {"name": "", "description": "nameless"},
        ]
    }
    pages = {
        "/.well-known/skills/index.json": json.dumps(index),
        "/.well-known/skills/pdf/SKILL.md": "---\nname: pdf\n---\nUse ref/forms.md",
        "/.well-known/skills/pdf/ref/forms.md": "THE FORMS",
        "/.well-known/skills/evil/SKILL.md": "evil body",
    }
    server = await nursery.start(FakeSSEServer(_raw("", 404)).serve)
    server.responder = lambda r: _raw(pages[r.path]) if r.path in pages else _raw("", 404)
    work = tmp_path / "work"
    skill(work / ".agents" / "skills" / "local-one", "local-one")
    sources = f"skills: [local, '{server.url}/', 'http://127.0.0.1:1']"
    config = parse_agent_file(agent_yaml(sources), "a.yaml")
    ctx = ToolContext(working_dir=work, data_dir=tmp_path / "data", env={"HOME": str(tmp_path)})
    tools = default_tools_for(config.agent(), ctx)
    assert tools.tools == {}  # read before the next model call
    with trio.fail_after(LIMIT):
        assert await tools.start() == []
    server.stop()
    assert set(tools.tools) == {"read_skill", "read_skill_file"}
    text = "\n".join(tools.instructions)
    for name in ("local-one", "pdf", "evil"):
        assert f"<name>{name}</name>" in text
    assert "<files>ref/forms.md</files>" in text
    read = tools.tools["read_skill"]
    assert (await read.call({"name": "pdf"})).output.endswith("Use ref/forms.md")
    forms = await tools.tools["read_skill_file"].call({"skill_name": "pdf", "path": "ref/forms.md"})
    assert forms.output == "THE FORMS"
    assert not any("passwd" in r.path for r in server.requests)
