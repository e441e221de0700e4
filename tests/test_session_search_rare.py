"""A rare word with a common one (decision 0026, "Amendment: a rare word with a common one"):
the SQL stores' indexes find the rarest word's documents only and check the other words on
them; the answer must stay exactly the sessions with a title or message holding a word
starting with each query word, in pages that neither repeat nor miss one, on every store.

Real clock: the SQL stores work in threads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from greenroom.domain import PageKey, Session, SessionQuery, query_words
from greenroom.persistence import Store
from tests.test_session_search import make
from tests.test_store_contract import KINDS, open_store


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(request.param, tmp_path) as opened:
        yield opened


def sessions() -> list[tuple[Session, bool]]:
    """80 sessions (newest last): most say "build", a few "okapi"; the pairs say whether the
    session holds both words in one title or message. The newest hold neither together, so
    the common-word walk gives up and the index answers."""
    made: list[tuple[Session, bool]] = []
    for n in range(80):
        texts = [f"we build thing {n}", "nothing else"]
        both = False
        if n in (3, 17, 29):  # both in one message; "builder" starts with "build"
            texts.append(f"the okapi {'builder' if n == 17 else 'build'} ran")
            both = True
        elif n in (8, 40):  # both, but in different messages: no match
            texts.append("an okapi alone")
        elif n == 50:  # "rebuild" does not start with "build"
            texts.append("okapi rebuild")
        elif n == 55:  # in the title
            both = True
        title = "Okapi builds" if n == 55 else f"t{n}"
        made.append((make(f"s{n:02d}", n, *texts, title=title), both))
    return made


@pytest.mark.parametrize("text", ["okapi build", "build okapi"])
@pytest.mark.parametrize("order", ["recent", "relevance"])
async def test_a_rare_and_a_common_word_find_exactly_the_sessions_with_both(
    store: Store, text: str, order: str
) -> None:
    made = sessions()
    for session, _ in made:
        await store.add_session(session)
    expected = [s.id for s, both in reversed(made) if both]  # newest first
    seen: list[str] = []
    after: PageKey | None = None
    for _ in range(10):  # bounded: 4 matches in pages of 1
        query = SessionQuery(words=query_words(text), order=order, limit=1, after=after)  # type: ignore[arg-type]
        page = await store.search_sessions(query)
        seen += [s.id for s in page.sessions]
        if page.next is None:
            break
        after = page.next
    assert len(seen) == len(set(seen)), seen  # no repeats
    if order == "recent":
        assert seen == expected
    else:
        assert sorted(seen) == sorted(expected)
    whole = await store.search_sessions(SessionQuery(words=query_words(text), limit=50))
    assert [s.id for s in whole.sessions] == expected
