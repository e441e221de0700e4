"""The session list's one-pass encoding (transport/_listing.py) writes what the general path
(cattrs, then json) wrote, byte for byte, for every summary a store can hold."""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import given, strategies as st

from greenroom.domain import SessionSummary, to_json
from greenroom.transport._listing import summaries_json

_text = st.text(st.characters(codec=None, categories=None), max_size=20)  # surrogates too
_zones = st.sampled_from(
    [dt.UTC, dt.timezone(dt.timedelta(hours=2)), dt.timezone(dt.timedelta(hours=-9, minutes=-30))]
)
_times = st.builds(
    lambda naive, zone: naive.replace(tzinfo=zone),
    st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(9998, 1, 1)),
    _zones,
)
_counts = st.integers(min_value=0, max_value=2**70)
_summaries = st.builds(
    SessionSummary,
    id=_text,
    title=_text,
    created_at=_times,
    num_messages=_counts,
    input_tokens=_counts,
    output_tokens=_counts,
    working_dir=_text,
    starred=st.booleans(),
    agent_file=_text,
    agent_name=_text,
)


def _general(summaries: list[SessionSummary]) -> bytes:
    values = [to_json(s, SessionSummary) for s in summaries]
    try:
        return json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(values, separators=(",", ":")).encode()


@given(st.lists(_summaries, max_size=5))
def test_the_list_is_what_cattrs_and_json_wrote(summaries: list[SessionSummary]) -> None:
    assert summaries_json(summaries).data == _general(summaries)


def test_times_are_utc_with_z_and_microseconds_only_when_there_are_some() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    times = [
        dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=plus_two),
        dt.datetime(2026, 3, 1, 12, 0, 0, 120, tzinfo=dt.UTC),
    ]
    summaries = [SessionSummary("s", "t", t, 0, 0, 0) for t in times]
    found = [s["created_at"] for s in json.loads(summaries_json(summaries).data)]
    assert found == ["2026-03-01T10:00:00Z", "2026-03-01T12:00:00.000120Z"]
