"""Prompt context and hooks end to end (issue 20, items 6 and 7): ``greenroom serve`` with an
agent that adds environment info, an AGENTS.md and a skill to its prompt and has a
``pre_tool_use`` hook denying dangerous shell commands and a ``session_start`` hook, against the
fake OpenAI server (which records what the model was sent), over HTTP and SSE.
Real clock; every wait bounded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.agents import fake_openai as fo
from tests.test_end_to_end import (
    DEADLINE,
    KEY,
    KEY_VAR,
    get_session,
    of_type,
    openai_model,
    run_turn,
    serving,
)

pytestmark = pytest.mark.slow

DENY_RM = (
    "INPUT=$(cat); case \"$INPUT\" in *'rm -rf'*) "
    """echo '{"hook_specific_output":{"permission_decision":"deny","""
    """"permission_decision_reason":"no rm -rf here"}}';; esac"""
)


def write_agent(tmp_path: Path, model: dict[str, str]) -> Path:
    lines = [
        "agents:",
        "  root:",
        "    model: main",
        "    instruction: You are a test agent.",
        "    welcome_message: Ahoy!",
        "    add_environment_info: true",
        "    add_prompt_files: [AGENTS.md]",
        "    skills: true",
        "    toolsets: [{type: shell}]",
        "    hooks:",
        "      pre_tool_use:",
        "        - matcher: shell",
        f"          hooks: [{{type: command, command: {json.dumps(DENY_RM)}, timeout: 10}}]",
        "      session_start:",
        "        - {type: command, command: 'cat > started.json'}",
        "models:",
        "  main:",
        *[f"    {key}: {json.dumps(value)}" for key, value in model.items()],
    ]
    path = tmp_path / "ctx.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_the_model_sees_the_context_and_a_hook_blocks_a_dangerous_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    skill = work / ".agents" / "skills" / "deploy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: deploy\ndescription: Deploys things\n---\nSteps")
    (work / "AGENTS.md").write_text("Never deploy on Fridays.")
    (work / "victim").mkdir()
    rm = fo.ToolCallScript("c1", "shell", ['{"cmd": "rm -rf victim"}'])
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            fake.script(fo.tool_call_reply(rm), fo.text_reply("I will not."))
            fake.responder = lambda _: fo.text_reply("A title")
            agent = write_agent(tmp_path, openai_model(fake))
            async with serving(agent, tmp_path / "db.sqlite3", titles=False) as server:
                client = server.client
                created = await client.post("/api/sessions", json={"working_dir": str(work)})
                session_id = created.json()["id"]
                frames = await run_turn(client, session_id, "ctx", "clean up please")
                config = (await client.get("/api/agents/ctx")).json()
                session = await get_session(client, session_id)
            nursery.cancel_scope.cancel()

    # The system prompt the model got: environment, prompt file, skills.
    system = fake.requests[0].json["messages"][0]
    assert system["role"] == "system"
    assert f"Working directory: {work}" in system["content"]
    assert "Never deploy on Fridays." in system["content"]
    assert "<name>deploy</name>" in system["content"]
    tools = [t["function"]["name"] for t in fake.requests[0].json["tools"]]
    assert "read_skill" in tools and "shell" in tools
    # The hook denied the call: nobody was asked, nothing was removed.
    assert not of_type(frames, "tool_call_confirmation")
    (blocked,) = of_type(frames, "hook_blocked")
    assert blocked.data["message"] == "no rm -rf here"
    assert blocked.data["tool_call"]["function"]["name"] == "shell"
    (response,) = of_type(frames, "tool_call_response")
    assert response.data["response"] == "Tool call blocked by hook: no rm -rf here"
    assert (work / "victim").is_dir()
    # The session_start hook ran in the working directory with its JSON input.
    started = json.loads((work / "started.json").read_text())
    assert started["hook_event_name"] == "session_start"
    assert started["session_id"] == session_id and started["cwd"] == str(work)
    # The welcome message reaches clients.
    assert of_type(frames, "agent_info")[0].data["welcome_message"] == "Ahoy!"
    assert config["agents"]["root"]["welcome_message"] == "Ahoy!"
    assert session["messages"][-1]["message"]["content"] == "I will not."
