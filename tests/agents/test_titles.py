"""Session titles: sanitising a model's answer, model order, fallback and failure."""

from __future__ import annotations

import pytest

from greenroom.agents import ModelTitleGenerator, sanitize_title
from greenroom.agents.providers import ModelConfig, ModelResponse
from greenroom.errors import ModelError, ModelTimeout

from .loop_support import FakeProvider, Step


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        ("Planning a trip", "Planning a trip"),
        ('  \n\n  "Quoted title"  \nsecond line', "Quoted title"),
        ("'single'\r\n", "single"),
        ("\u201cCurly\u201d", "Curly"),
        ("x" * 80, "x" * 50),
        ("A" * 49 + " tail", "A" * 49),
        ("   \n\t\n", ""),
        ('""', ""),
    ],
)
def test_sanitize_title(raw: str, title: str) -> None:
    assert sanitize_title(raw) == title


def answer(content: str) -> Step:
    return Step(response=ModelResponse(content=content))


MAIN = ModelConfig(name="main", provider="fake", model="main", max_tokens=4000)
TITLES = ModelConfig(name="titles", provider="fake", model="small")


async def test_title_from_the_first_model_with_a_short_single_line_prompt() -> None:
    provider = FakeProvider(answer('"Trip to Rome"\nextra'))
    generator = ModelTitleGenerator(lambda: [TITLES, MAIN], provider.provider_for)
    assert await generator.generate(["Plan my trip to Rome", "", "  with kids"]) == "Trip to Rome"
    request = provider.requests[0]
    assert request.model.model == "small"
    assert request.max_tokens == 20
    assert request.model.max_tokens == 20
    system, user = request.messages
    assert system.role == "system"
    assert "single line" in system.content
    assert "1. Plan my trip to Rome\n2. with kids" in user.content
    assert "50 characters" in user.content
    assert provider.made_for == [TITLES]


async def test_a_failing_or_empty_model_falls_back_to_the_next() -> None:
    provider = FakeProvider(Step(error=ModelTimeout()), answer("  "), answer("Third time"))
    generator = ModelTitleGenerator(lambda: [TITLES, MAIN, MAIN], provider.provider_for)
    assert await generator.generate(["hello"]) == "Third time"
    assert len(provider.requests) == 3


async def test_all_models_failing_raises() -> None:
    provider = FakeProvider(Step(error=ModelTimeout("late")))
    generator = ModelTitleGenerator(lambda: [MAIN], provider.provider_for)
    with pytest.raises(ModelTimeout, match="late"):
        await generator.generate(["hello"])
    provider = FakeProvider(answer('""'))
    generator = ModelTitleGenerator(lambda: [MAIN], provider.provider_for)
    with pytest.raises(ModelError, match="no usable title"):
        await generator.generate(["hello"])


async def test_no_user_text_raises_without_calling_a_model() -> None:
    provider = FakeProvider()
    generator = ModelTitleGenerator(lambda: [MAIN], provider.provider_for)
    with pytest.raises(ModelError):
        await generator.generate(["", "   "])
    assert provider.requests == []
