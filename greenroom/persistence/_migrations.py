"""Numbered SQL migrations, once for both SQL stores: the bundled files of a package
(``0001_initial.sql``, ...: versions 1..N, no gap), and the runner that refuses a database
written by a newer schema and applies what is missing, in order. Each store applies one
migration in its own way (SQLite: a transaction each; PostgreSQL: all in the caller's
transaction, under an advisory lock)."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from importlib import resources

from greenroom.errors import NewerDatabase

Migration = tuple[int, str, str]  # (version, name, sql)
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def bundled(package: str) -> list[Migration]:
    """Every migration in ``package``'s files, in order; versions are 1, 2, 3, ..."""
    found = []
    for entry in resources.files(package).iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    found.sort()
    if [v for v, _, _ in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"the migrations bundled in {package} are not numbered 1..N")
    return found


def run(
    known: list[Migration],
    applied: Collection[int],
    apply: Callable[[Migration], None],
    *,
    where: str,
    instead: str,
) -> None:
    """``apply`` each of ``known`` not ``applied`` yet, in order.

    Raises:
        NewerDatabase: the database has a version this code does not know; it names ``where``
            and says to upgrade greenroom or ``instead``.
    """
    newest = max(applied, default=0)
    if newest > len(known):
        raise NewerDatabase(
            f"{where} was written by a newer greenroom (schema {newest}, this version knows "
            f"{len(known)}); upgrade greenroom or {instead}"
        )
    for migration in known:
        if migration[0] not in applied:
            apply(migration)
