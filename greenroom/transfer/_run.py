"""Import and export against an open store: pages of sessions in, one session at a time out,
a progress line every N sessions, and a report of what happened.

Import is idempotent by session id: each session is added with its whole history in one
transaction (``Store.add_session``); an id the store already holds (on PostgreSQL, a deleted
session's too) is skipped, never overwritten, so running an import again adds only what is
new, and an import cut short leaves whole sessions only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import IO

import attrs
import trio

from greenroom.domain import Session, check_value, parse
from greenroom.errors import InvalidRequest, SessionExists, SessionNotFound
from greenroom.persistence import Store

from ._docker_agent_db import Loaded
from ._jsonl import session_line

Progress = Callable[[str], None]
NextPage = Callable[[], list[Loaded]]  # blocking: run on a worker thread; [] when done


@attrs.define
class ImportReport:
    read: int = 0
    imported: int = 0
    present: int = 0
    failed: list[str] = attrs.field(factory=list)  # "where: why", one per session
    dropped: Counter[str] = attrs.field(factory=Counter)

    def line(self) -> str:
        return (
            f"{self.read} sessions read: {self.imported} imported, {self.present} already "
            f"present (skipped), {len(self.failed)} failed"
        )


def to_session(loaded: Loaded, root: str) -> Session:
    """The checked session of ``loaded`` (InvalidRequest naming the JSON path if not)."""
    if loaded.data is None:
        raise InvalidRequest(loaded.error)
    check_value(loaded.data, root)
    session: Session = parse(loaded.data, Session, root=root)
    if not session.id:
        raise InvalidRequest(f"{root}.id: a session needs an id", path=f"{root}.id")
    return session


async def import_pages(
    store: Store, next_page: NextPage, *, root: str, progress: Progress, every: int
) -> ImportReport:
    """Add every session ``next_page`` yields that ``store`` does not hold yet."""
    report = ImportReport()
    while True:
        # Reading and checking a page is blocking work: a worker thread, one page in memory.
        page = await trio.to_thread.run_sync(lambda: _checked(next_page(), root))
        if not page:
            return report
        for loaded, session in page:
            report.read += 1
            report.dropped.update(loaded.dropped)
            if isinstance(session, str):
                report.failed.append(f"{loaded.where}: {session}")
            else:
                try:
                    await store.add_session(session)
                    report.imported += 1
                except SessionExists:
                    report.present += 1
                except InvalidRequest as exc:  # a value the store itself refused
                    report.failed.append(f"{loaded.where}: {exc}")
            if every and report.read % every == 0:
                progress(report.line())


def _checked(page: list[Loaded], root: str) -> list[tuple[Loaded, Session | str]]:
    out: list[tuple[Loaded, Session | str]] = []
    for loaded in page:
        try:
            out.append((loaded, to_session(loaded, root)))
        except InvalidRequest as exc:
            out.append((loaded, str(exc)))
    return out


@attrs.define
class ExportReport:
    written: int = 0
    missing: list[str] = attrs.field(factory=list)


async def export_sessions(
    store: Store, out: IO[bytes], ids: Sequence[str], *, progress: Progress, every: int
) -> ExportReport:
    """Write ``ids`` (every root session, newest first, when empty) to ``out``, one line each."""
    report = ExportReport()
    wanted = list(ids) or [summary.id for summary in await store.list_sessions()]
    for session_id in wanted:
        try:
            session = await store.get_session(session_id)
        except SessionNotFound:
            report.missing.append(session_id)
            continue
        line = session_line(session)
        await trio.to_thread.run_sync(out.write, line)
        report.written += 1
        if every and report.written % every == 0:
            progress(f"{report.written} of {len(wanted)} sessions written")
    await trio.to_thread.run_sync(out.flush)
    return report
