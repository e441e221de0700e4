"""When a schedule fires: its cron expression read as the wall-clock time of an IANA zone.

The expression has five fields (minute hour day month weekday), or six (a sixth for seconds,
croniter's convention), or is a macro (``@hourly``, ``@daily``, ...). Daylight saving time
(decision 0028): every wall-clock time the expression names fires once. A time that happens
twice (the clocks go back) fires the first time; a time that does not exist (the clocks go
forward) fires as if the clocks had not moved yet (02:30 in a gap from 02:00 to 03:00 fires at
03:30, the same instant). croniter is imported when a schedule is used, not at start.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from greenroom.errors import InvalidRequest

_MAX_SKIPS = 100_000  # candidates before the first one after ``after`` (a repeated hour)


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; InvalidRequest at ``$.timezone`` if there is none."""
    if not name or name != name.strip() or name.startswith(("/", ".")) or ".." in name:
        raise InvalidRequest(
            f"$.timezone: {name!r} is not an IANA time zone (e.g. Europe/Berlin, UTC)",
            path="$.timezone",
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidRequest(
            f"$.timezone: unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin, UTC)",
            path="$.timezone",
        ) from None


def check_cron(expression: str, timezone: str, now: float) -> int:
    """The first occurrence after ``now`` of a valid expression; InvalidRequest at ``$.cron``
    (malformed, or it never fires) or ``$.timezone``."""
    where = zone(timezone)
    text = expression.strip()
    fields = text.split()
    if not text or (not text.startswith("@") and len(fields) not in (5, 6)):
        raise InvalidRequest(
            f"$.cron: {expression!r} is not a cron expression of 5 fields (minute hour day "
            "month weekday), 6 (and seconds) or a macro such as @daily",
            path="$.cron",
        )
    from croniter import croniter  # only when schedules are used

    if not croniter.is_valid(text):
        raise InvalidRequest(
            f"$.cron: {expression!r} is not a valid cron expression", path="$.cron"
        )
    try:
        return _next(text, where, now)
    except (ValueError, OverflowError) as exc:  # CroniterBadDateError: no such date, ever
        raise InvalidRequest(f"$.cron: {expression!r} never fires ({exc})", path="$.cron") from None


def next_occurrence(expression: str, timezone: str, after: float) -> int:
    """The first occurrence strictly after ``after`` (epoch seconds), as epoch seconds."""
    return _next(expression.strip(), zone(timezone), after)


def _next(expression: str, where: ZoneInfo, after: float) -> int:
    from croniter import croniter

    # Candidates are naive wall times of the zone, in order; each one's instant is read with
    # fold=0 (the first of a repeated time; before the change for a missing one), which never
    # goes backwards as the wall time goes forwards. The first instant after ``after`` wins.
    start = datetime.fromtimestamp(after, where).replace(tzinfo=None)
    candidates = croniter(expression, start)
    for _ in range(_MAX_SKIPS):
        wall: datetime = candidates.get_next(datetime)
        instant = wall.replace(tzinfo=where, fold=0).timestamp()
        if instant > after:
            return int(instant)
    raise ValueError("no occurrence found")
