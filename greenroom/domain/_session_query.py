"""A search of the session list and one page of its answer (decision 0026): the filters, the
order, the keyset position a page starts after, and the words of a full-text query as every
store reads them.

Words: the query text is cut into runs of letters and digits (``_`` and punctuation separate
them), lower-cased, with diacritics removed (``é`` is ``e``) — the rule of SQLite FTS5's
``unicode61 remove_diacritics 2`` tokenizer, which the memory store applies in Python and
PostgreSQL approximates with its ``simple`` configuration (which keeps diacritics).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

import attrs

from ._types import SessionSummary

SessionOrder = Literal["relevance", "recent"]
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_QUERY = 500  # characters of q
MAX_WORDS = 16  # words of q that count; the rest are ignored

_WORD = re.compile(r"[^\W_]+")


def fold(text: str) -> str:
    """Lower case, diacritics removed."""
    if text.isascii():  # nothing to decompose
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def search_words(text: str) -> list[str]:
    """The words of ``text`` as the search sees them (folded, in order, repeats kept)."""
    return _WORD.findall(fold(text))


def query_words(text: str) -> tuple[str, ...]:
    """The distinct words of a query, in order, at most :data:`MAX_WORDS`."""
    return tuple(dict.fromkeys(search_words(text)))[:MAX_WORDS]


@attrs.frozen
class PageKey:
    """Where a page starts: after the session with this sort key. ``score``: its relevance
    (lower is better; None in the recent order); ``created_us``: its creation time in
    microseconds since the epoch (as the store keys it); ``seq``: the store's insertion number.
    ``horizon``: the highest insertion number when the walk began; later sessions are left out
    of the walk's next pages."""

    score: float | None
    created_us: int
    seq: int
    horizon: int


@attrs.frozen
class SessionQuery:
    """Root sessions matching every filter given: ``words`` (each the start of a word of the
    title, or each the start of a word of one user or assistant message: ``zebra`` finds
    "zebracorns"), ``agent`` (the session's agent file or agent name),
    ``starred``, ``since`` <= created < ``until`` (microseconds since the epoch)."""

    words: tuple[str, ...] = ()
    agent: str | None = None
    starred: bool | None = None
    since_us: int | None = None
    until_us: int | None = None
    order: SessionOrder = "recent"
    limit: int = DEFAULT_LIMIT
    after: PageKey | None = None


@attrs.frozen
class SessionPage:
    """A page of matching sessions in the query's order; ``next`` is where the following page
    starts (None: this is the last)."""

    sessions: tuple[SessionSummary, ...]
    next: PageKey | None = None
