"""When schedules fire (decision 0028): a cron expression read as a zone's wall-clock time,
across both daylight-saving changes, with a seconds field and macros; and the 400s of an
expression or zone that cannot be used."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from greenroom.actors._cron import check_cron, next_occurrence
from greenroom.errors import InvalidRequest


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def occurrences(cron: str, zone: str, after: str, count: int) -> list[str]:
    found, t = [], utc(after)
    for _ in range(count):
        t = next_occurrence(cron, zone, t)
        found.append(datetime.fromtimestamp(t, UTC).strftime("%m-%d %H:%M:%S"))
    return found


def test_a_missing_wall_time_fires_once_at_the_instant_after_the_gap() -> None:
    # Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    assert occurrences("*/30 * * * *", "Europe/Berlin", "2026-03-29T00:00:00", 5) == [
        "03-29 00:30:00",  # 01:30 CET
        "03-29 01:00:00",  # 02:00 does not exist: 03:00 CEST, the same instant, once
        "03-29 01:30:00",  # 02:30 (missing) and 03:30 CEST: one instant, once
        "03-29 02:00:00",  # 04:00 CEST
        "03-29 02:30:00",
    ]
    daily = occurrences("30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00", 3)
    assert daily == ["03-28 01:30:00", "03-29 01:30:00", "03-30 00:30:00"]  # 03:30 CEST once


def test_a_repeated_wall_time_fires_the_first_time_only() -> None:
    # Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:xx happens twice.
    assert occurrences("30 * * * *", "Europe/Berlin", "2026-10-24T23:45:00", 3) == [
        "10-25 00:30:00",  # 02:30 CEST
        "10-25 02:30:00",  # 03:30 CET (02:30 CET, the repeat, does not fire again)
        "10-25 03:30:00",
    ]
    daily = occurrences("30 2 * * *", "Europe/Berlin", "2026-10-23T12:00:00", 3)
    assert daily == ["10-24 00:30:00", "10-25 00:30:00", "10-26 01:30:00"]


def test_seconds_macros_and_other_zones() -> None:
    assert occurrences("* * * * * */20", "UTC", "2026-01-01T00:00:01", 3) == [
        "01-01 00:00:20",
        "01-01 00:00:40",
        "01-01 00:01:00",
    ]
    assert occurrences("@hourly", "Asia/Kathmandu", "2026-01-01T00:00:00", 2) == [
        "01-01 00:15:00",  # UTC+05:45: the zone's hours
        "01-01 01:15:00",
    ]
    assert occurrences("0 9 * * 1", "Australia/Sydney", "2026-04-01T00:00:00", 2) == [
        "04-05 23:00:00",  # Monday 09:00 AEST (UTC+10) after DST ended on 04-05
        "04-12 23:00:00",
    ]
    # Strictly after: an occurrence exactly at ``after`` is not the next one.
    assert occurrences("0 * * * *", "UTC", "2026-01-01T05:00:00", 1) == ["01-01 06:00:00"]


@pytest.mark.parametrize(
    ("cron", "zone", "path"),
    [
        ("", "UTC", "$.cron"),
        ("* * * *", "UTC", "$.cron"),
        ("* * * * * * *", "UTC", "$.cron"),
        ("60 * * * *", "UTC", "$.cron"),
        ("* * * 13 *", "UTC", "$.cron"),
        ("0 0 31 2 *", "UTC", "$.cron"),
        ("@reboot", "UTC", "$.cron"),
        ("* * * * *", "Nowhere/Nothing", "$.timezone"),
        ("* * * * *", "/etc/localtime", "$.timezone"),
        ("* * * * *", "Europe/../UTC", "$.timezone"),
        ("* * * * *", " UTC", "$.timezone"),
    ],
)
def test_what_cannot_be_used_is_a_400_naming_the_field(cron: str, zone: str, path: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_cron(cron, zone, utc("2026-01-01T00:00:00"))
    assert caught.value.path == path
