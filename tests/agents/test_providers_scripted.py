"""The scripted provider: script parsing, replay order, delays, errors, exhaustion.

Rules: no sockets here; tests that sleep take ``autojump_clock`` so delays cost no real time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from greenroom.agents.providers import (
    Delta,
    ModelConfig,
    ModelRequest,
    ReasoningDelta,
    ScriptedProvider,
    TextDelta,
    make_provider,
    parse_script,
)
from greenroom.domain import ChatMessage, FunctionCall, ToolCall, Usage
from greenroom.errors import (
    InvalidRequest,
    ModelError,
    ModelKeyMissing,
    ModelRateLimited,
    ModelStreamMalformed,
    ModelTimeout,
)

SCRIPT = """
turns:
  - "Hello there friend"
  - - reasoning: ["Need a ", "listing."]
    - text: ["Let me ", "look."]
    - tool_call: {name: shell, arguments: {cmd: ls}}
    - tool_call: {name: read, arguments: '{"path": "a"}', id: my_id}
  - - delay: 2.5
    - text: ["done"]
    - usage: {input_tokens: 120, output_tokens: 9}
"""

CONFIG = ModelConfig(name="s", provider="scripted", model="demo.yaml")
REQUEST = ModelRequest(model=CONFIG, messages=(ChatMessage(role="user", content="hi there"),))


class Deltas:
    def __init__(self) -> None:
        self.got: list[Delta] = []

    async def __call__(self, delta: Delta) -> None:
        self.got.append(delta)


async def test_turns_play_in_order(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider(parse_script(SCRIPT))

    first = Deltas()
    response = await provider.complete(REQUEST, first)
    assert first.got == [TextDelta("Hello"), TextDelta(" there"), TextDelta(" friend")]
    assert response.content == "Hello there friend"
    assert response.stop_reason == "stop"
    assert response.model == "demo.yaml"

    second = Deltas()
    response = await provider.complete(REQUEST, second)
    assert second.got == [
        ReasoningDelta("Need a "),
        ReasoningDelta("listing."),
        TextDelta("Let me "),
        TextDelta("look."),
    ]
    assert response.reasoning == "Need a listing."
    assert response.tool_calls == (
        ToolCall("call_2_3", FunctionCall("shell", '{"cmd": "ls"}')),
        ToolCall("my_id", FunctionCall("read", '{"path": "a"}')),
    )
    assert response.stop_reason == "tool_calls"

    start = trio.current_time()
    response = await provider.complete(REQUEST, Deltas())
    assert trio.current_time() - start == pytest.approx(2.5)
    assert response.usage == Usage(input_tokens=120, output_tokens=9)
    assert provider.position == 3


async def test_default_usage_is_estimated() -> None:
    provider = ScriptedProvider(parse_script('["one two three"]'))
    response = await provider.complete(REQUEST, Deltas())
    assert response.usage.output_tokens == 3
    assert response.usage.input_tokens > 0


async def test_exhausted_script_is_a_model_error() -> None:
    provider = ScriptedProvider(parse_script("turns: [only]"))
    await provider.complete(REQUEST, Deltas())
    with pytest.raises(ModelError, match="all 1 turns were played"):
        await provider.complete(REQUEST, Deltas())


async def test_looping_script_starts_over() -> None:
    provider = ScriptedProvider(parse_script("loop: true\nturns: [a, b]"))
    contents = [(await provider.complete(REQUEST, Deltas())).content for _ in range(5)]
    assert contents == ["a", "b", "a", "b", "a"]


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("model_error", ModelError),
        ("missing_api_key", ModelKeyMissing),
        ("rate_limited", ModelRateLimited),
        ("model_timeout", ModelTimeout),
        ("malformed_stream", ModelStreamMalformed),
    ],
)
async def test_error_step_raises_the_matching_error(code: str, error: type[ModelError]) -> None:
    provider = ScriptedProvider(parse_script(f"[[{{text: [partial]}}, {{error: {code}}}]]"))
    deltas = Deltas()
    with pytest.raises(error) as caught:
        await provider.complete(REQUEST, deltas)
    assert type(caught.value) is error
    assert caught.value.code == code
    assert deltas.got == [TextDelta("partial")]


async def test_error_step_with_a_message() -> None:
    script = "[[{error: {code: rate_limited, message: try later}}], ok]"
    provider = ScriptedProvider(parse_script(script))
    with pytest.raises(ModelRateLimited, match="try later"):
        await provider.complete(REQUEST, Deltas())
    assert (await provider.complete(REQUEST, Deltas())).content == "ok"


async def test_delay_is_cancellable(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider(parse_script("[[{delay: 60}, {text: late}]]"))
    deltas = Deltas()
    with trio.move_on_after(1) as scope:
        await provider.complete(REQUEST, deltas)
    assert scope.cancelled_caught
    assert deltas.got == []


def test_json_scripts_parse_too() -> None:
    script = parse_script('{"turns": [[{"text": ["a", "b"]}]], "loop": true}')
    assert script.loop
    assert len(script.turns) == 1


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("turns: []", "$.turns"),
        ("{turns: [a], extra: 1}", "$"),
        ("{turns: [a], loop: maybe}", "$.loop"),
        ("[[{text: a, reasoning: b}]]", "$.turns[0][0]"),
        ("[[{sing: a}]]", "$.turns[0][0].sing"),
        ("[[{text: [1, 2]}]]", "$.turns[0][0].text"),
        ("[a, [{tool_call: {arguments: {}}}]]", "$.turns[1][0].tool_call"),
        ("[[{tool_call: {name: x, arguments: 3}}]]", "$.turns[0][0].tool_call.arguments"),
        ("[[{delay: -1}]]", "$.turns[0][0].delay"),
        ("[[{error: on_fire}]]", "$.turns[0][0].error"),
        ("[[{usage: {input_tokens: many}}]]", "$.turns[0][0].usage"),
        ("[[{usage: {tokens: 3}}]]", "$.turns[0][0].usage"),
        ("[7]", "$.turns[0]"),
    ],
)
def test_bad_scripts_name_the_bad_entry(text: str, path: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_script(text, source="bad.yaml")
    assert caught.value.path == path
    assert "bad.yaml" in caught.value.message


def test_invalid_yaml_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="not valid YAML"):
        parse_script("turns: [unclosed")


async def test_make_provider_resolves_the_script_against_base_dir(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "demo.yaml").write_text("[from file]")
    config = ModelConfig(name="s", provider="scripted", model="scripts/demo.yaml")
    provider = make_provider(config, base_dir=tmp_path)
    assert isinstance(provider, ScriptedProvider)
    response = await provider.complete(ModelRequest(model=config, messages=()), Deltas())
    assert response.content == "from file"
    absolute = ModelConfig(name="s", provider="scripted", model=str(tmp_path / "scripts/demo.yaml"))
    assert isinstance(make_provider(absolute), ScriptedProvider)


def test_missing_script_file_is_an_invalid_request(tmp_path: Path) -> None:
    config = ModelConfig(name="s", provider="scripted", model="nope.yaml")
    with pytest.raises(InvalidRequest, match="cannot read script"):
        make_provider(config, base_dir=tmp_path)
