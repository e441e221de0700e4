"""Reading a trace back: finished spans by name, parent and trace."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, f"{len(found)} spans named {name!r} in {names(spans)}"
    return found[0]


def names(spans: Sequence[ReadableSpan]) -> list[str]:
    return [s.name for s in spans]


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if parent_id(s) == span_id(parent)]


def child(spans: Sequence[ReadableSpan], parent: ReadableSpan, name: str) -> ReadableSpan:
    found = [s for s in children(spans, parent) if s.name == name]
    assert len(found) == 1, f"{name!r} under {parent.name!r}: {names(children(spans, parent))}"
    return found[0]


def ancestors(spans: Sequence[ReadableSpan], span: ReadableSpan) -> list[str]:
    """The names from ``span``'s parent up to its trace's root (as far as spans were kept)."""
    by_id = {span_id(s): s for s in spans}
    found = []
    current = by_id.get(parent_id(span) or -1)
    while current is not None:
        found.append(current.name)
        current = by_id.get(parent_id(current) or -1)
    return found


def header_ids(traceparent: str) -> tuple[int, int]:
    """(trace id, parent span id) of a ``traceparent`` header."""
    version, trace, parent, flags = traceparent.split("-")
    assert version == "00" and len(trace) == 32 and len(parent) == 16 and len(flags) == 2
    return int(trace, 16), int(parent, 16)
