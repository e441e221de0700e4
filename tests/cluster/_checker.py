"""One invariant checker over the database, the clients' event logs and the side-effect file.

:func:`check` is pure: it takes a :class:`Snapshot` of the database (:func:`load_snapshot`
reads one from PostgreSQL) and what the clients saw, and returns every violation it finds (an
empty list: all hold). The invariants:

- single owner: per session the events' epoch never decreases along seq; at most one running
  turn per session; at quiescence no running turn whose session's owner is not a live node;
- no lost committed event: every (session, seq, body hash) a client received is in gr_events
  with that hash;
- seqs are exactly 1..last_seq per session (retention may leave holes when allowed);
- each client's seqs strictly increase, with no hole except after an explicit gap;
- no resurrection: a deleted session keeps its row with deleted_at set, has its
  session_exited and no event after it (reads and creates are checked live, over HTTP);
- a tool call's side-effect lines are at most 1 + the rerun decisions taken on it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping

import attrs


def digest(body: bytes | str) -> str:
    data = body.encode() if isinstance(body, str) else body
    return hashlib.sha256(data).hexdigest()


@attrs.frozen
class StoredEvent:
    seq: int
    epoch: int
    type: str
    sha: str


@attrs.frozen
class Head:
    epoch: int
    owner_node: str | None
    owner_inc: int | None
    last_seq: int
    state: str


@attrs.frozen
class Turn:
    session_id: str
    turn_id: str
    epoch: int
    state: str


@attrs.define
class Snapshot:
    events: dict[str, list[StoredEvent]] = attrs.field(factory=dict)  # in seq order
    heads: dict[str, Head] = attrs.field(factory=dict)
    turns: list[Turn] = attrs.field(factory=list)
    deleted_at: dict[str, dt.datetime | None] = attrs.field(factory=dict)  # every session row
    live_nodes: set[tuple[str, int]] = attrs.field(factory=set)  # (node id, incarnation)


@attrs.frozen
class ClientLog:
    """What one client received from one session's streams, in arrival order."""

    name: str
    session_id: str
    entries: tuple[tuple[int, str], ...]  # (seq, sha256 of the body)
    gaps: frozenset[int] = frozenset()  # an explicit gap came right after these seqs
    start: int = 0  # the Last-Event-ID it first asked with


@attrs.frozen
class Expectations:
    deleted: frozenset[str] = frozenset()  # sessions whose delete was answered 2xx
    side_effects: tuple[tuple[str, int], ...] = ()  # (tool call id, pid) lines
    reruns: Mapping[str, int] = attrs.field(factory=dict)  # tool call id -> rerun decisions
    quiescent: bool = True
    retention_gaps: bool = False


def check(snapshot: Snapshot, clients: Iterable[ClientLog], expect: Expectations) -> list[str]:
    problems: list[str] = []
    problems += _single_owner(snapshot, expect.quiescent)
    problems += _contiguous(snapshot, expect.retention_gaps)
    for log in clients:
        problems += _client(snapshot, log)
    problems += _deleted(snapshot, expect.deleted)
    problems += _tools(expect.side_effects, expect.reruns)
    return problems


def _single_owner(snapshot: Snapshot, quiescent: bool) -> list[str]:
    problems = []
    for session_id, events in snapshot.events.items():
        for before, after in itertools.pairwise(events):
            if after.epoch < before.epoch:
                problems.append(
                    f"{session_id}: seq {after.seq} has epoch {after.epoch}"
                    f" after seq {before.seq} at epoch {before.epoch} (two writers)"
                )
    running = Counter(t.session_id for t in snapshot.turns if t.state == "running")
    for session_id, count in running.items():
        if count > 1:
            problems.append(f"{session_id}: {count} running turns")
        head = snapshot.heads.get(session_id)
        owner = (head.owner_node, head.owner_inc) if head else (None, None)
        if quiescent and owner not in snapshot.live_nodes:
            problems.append(f"{session_id}: a turn is still running, owner {owner} is not live")
    return problems


def _contiguous(snapshot: Snapshot, retention_gaps: bool) -> list[str]:
    problems = []
    for session_id in snapshot.events.keys() | snapshot.heads.keys():
        seqs = [e.seq for e in snapshot.events.get(session_id, [])]
        head = snapshot.heads.get(session_id)
        last = head.last_seq if head else 0
        if len(seqs) != len(set(seqs)):
            problems.append(f"{session_id}: a seq is stored twice")
        if seqs and (seqs[-1] > last or seqs[0] < 1):
            problems.append(f"{session_id}: seqs {seqs[0]}..{seqs[-1]} beyond last_seq {last}")
        missing = sorted(set(range(1, last + 1)) - set(seqs))
        if missing and not retention_gaps:
            problems.append(f"{session_id}: seqs missing below last_seq {last}: {missing[:5]}")
    return problems


def _client(snapshot: Snapshot, log: ClientLog) -> list[str]:
    problems = []
    stored = {e.seq: e.sha for e in snapshot.events.get(log.session_id, [])}
    previous = log.start
    for seq, sha in log.entries:
        if seq not in stored:
            problems.append(f"{log.name} {log.session_id}: got seq {seq}, not in gr_events")
        elif stored[seq] != sha:
            problems.append(f"{log.name} {log.session_id}: seq {seq} differs from gr_events")
        if seq <= previous:
            problems.append(f"{log.name} {log.session_id}: seq {seq} after {previous}")
        elif seq != previous + 1 and previous not in log.gaps:
            problems.append(f"{log.name} {log.session_id}: hole {previous} -> {seq}, no gap")
        previous = max(previous, seq)
    return problems


def _deleted(snapshot: Snapshot, deleted: frozenset[str]) -> list[str]:
    problems = []
    for session_id in sorted(deleted):
        if session_id not in snapshot.deleted_at:
            problems.append(f"{session_id}: deleted, but its gr_sessions row is gone")
        elif snapshot.deleted_at[session_id] is None:
            problems.append(f"{session_id}: deleted, but deleted_at is cleared")
        events = snapshot.events.get(session_id, [])
        exits = [e.seq for e in events if e.type == "session_exited"]
        if not exits:
            problems.append(f"{session_id}: deleted without a session_exited event")
        elif events[-1].seq != exits[0]:
            problems.append(f"{session_id}: events after session_exited (seq {exits[0]})")
    return problems


def _tools(side_effects: Iterable[tuple[str, int]], reruns: Mapping[str, int]) -> list[str]:
    ran = Counter(call for call, _ in side_effects)
    return [
        f"tool call {call} ran {count} times ({reruns.get(call, 0)} reruns decided)"
        for call, count in sorted(ran.items())
        if count > 1 + reruns.get(call, 0)
    ]


# --- reading PostgreSQL ------------------------------------------------------------------------


def load_snapshot(database_url: str) -> Snapshot:
    """Read the whole cluster database (a test's: small) into a Snapshot. Blocking."""
    import psycopg  # only tests with PostgreSQL get here

    snapshot = Snapshot()
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT session_id, seq, epoch, type, body FROM gr_events ORDER BY session_id, seq"
        )
        for session_id, seq, epoch, kind, body in rows:
            event = StoredEvent(int(seq), int(epoch), str(kind), digest(bytes(body)))
            snapshot.events.setdefault(str(session_id), []).append(event)
        rows = conn.execute(
            "SELECT session_id, epoch, owner_node, owner_inc, last_seq, state FROM gr_heads"
        )
        for session_id, epoch, node, inc, last_seq, state in rows:
            owner_inc = None if inc is None else int(inc)
            head = Head(int(epoch), node, owner_inc, int(last_seq), str(state))
            snapshot.heads[str(session_id)] = head
        rows = conn.execute("SELECT session_id, turn_id, epoch, state FROM gr_turns")
        snapshot.turns = [Turn(str(s), str(t), int(e), str(st)) for s, t, e, st in rows]
        rows = conn.execute("SELECT session_id, deleted_at FROM gr_sessions")
        for session_id, deleted_at in rows:
            snapshot.deleted_at[str(session_id)] = deleted_at
        rows = conn.execute("SELECT node_id, incarnation FROM gr_nodes WHERE lease_until > now()")
        snapshot.live_nodes = {(str(node), int(inc)) for node, inc in rows}
    return snapshot
