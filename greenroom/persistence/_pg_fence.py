"""The fence and the claim: who may write a session's log and records on PostgreSQL.

Every write of a session's log or records updates its ``gr_heads`` row matching the writer's
epoch and this node's incarnation; no row matched means another node took the session over
(epoch + 1), it was deleted, or this node's incarnation is gone: the write rolls back. Both
interleavings with a takeover are safe under READ COMMITTED: a batch that commits first is seen
by the takeover (it waits on the row lock, then reads the new last_seq); a takeover that
commits first makes the batch's UPDATE re-check the new row version and match nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg

from greenroom.errors import NodeFenced, OwnedElsewhere, SessionNotFound

from ._records import EventRow, Lease

Conn = psycopg.Connection[Any]

_FENCE_EVENTS = (
    "UPDATE gr_heads h SET last_seq = v.last"
    " FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[]) AS v(sid, ep, first, last)"
    " WHERE h.session_id = v.sid AND h.epoch = v.ep AND h.owner_node = %s AND h.owner_inc = %s"
    " AND h.last_seq = v.first - 1 RETURNING h.session_id"
)
_COPY_EVENTS = "COPY gr_events (session_id, seq, epoch, type, body, created_at) FROM STDIN"
FENCED = "the session's log moved on, is gone, or another node owns it now (fenced)"


def flush_events(
    conn: Conn, rows: list[EventRow], failed: dict[str, str], node: str, inc: int
) -> dict[str, int]:
    """Fence and insert ``rows`` (append order): one UPDATE for every session's fence, one
    COPY for the rows; the new head of each session written. A session whose rows do not
    continue its head under this node's epoch lands in ``failed`` and writes nothing."""
    spans: dict[str, list[EventRow]] = {}
    for row in rows:
        spans.setdefault(row.session_id, []).append(row)
    wanted: dict[str, int] = {}
    sids, epochs, firsts, lasts = [], [], [], []
    for session_id, span in spans.items():
        if session_id in failed:
            continue
        first, last = span[0].seq, span[-1].seq
        if last - first + 1 != len(span) or any(r.epoch != span[0].epoch for r in span):
            failed[session_id] = f"event seqs {first}..{last} are not contiguous"
            continue
        wanted[session_id] = last
        sids.append(session_id)
        epochs.append(span[0].epoch)
        firsts.append(first)
        lasts.append(last)
    if not sids:
        return {}
    fenced = conn.execute(_FENCE_EVENTS, (sids, epochs, firsts, lasts, node, inc)).fetchall()
    held = {r[0] for r in fenced}
    heads = {}
    for session_id, last in wanted.items():
        if session_id in held:
            heads[session_id] = last
        else:
            failed[session_id] = FENCED
    with conn.cursor() as cursor, cursor.copy(_COPY_EVENTS) as copy:
        for row in rows:
            if row.session_id in heads:
                copy.write_row(row)
    return heads


def notify(conn: Conn, node: str, heads: dict[str, int]) -> None:
    """One NOTIFY on ``gr_ev`` per 7,000 bytes of ``session_id:last_seq`` lines, after a
    first line naming this node (listeners skip their own node's commits)."""
    if not heads:
        return
    lines = [f"{sid}:{seq}" for sid, seq in heads.items()]
    payloads, current, size = [], [node], len(node.encode())
    for line in lines:
        width = len(line.encode()) + 1
        if len(current) > 1 and size + width > 7000:
            payloads.append("\n".join(current))
            current, size = [node], len(node.encode())
        current.append(line)
        size += width
    payloads.append("\n".join(current))
    for payload in payloads:
        conn.execute("SELECT pg_notify('gr_ev', %s)", (payload,))


def parse_notify(payload: str) -> tuple[str, list[tuple[str, int]]]:
    """(node, [(session_id, seq), ...]) of a ``gr_ev`` payload; malformed lines are skipped."""
    node, _, rest = payload.partition("\n")
    found = []
    for line in rest.splitlines():
        sid, _, seq = line.rpartition(":")
        if sid and seq.isdigit():
            found.append((sid, int(seq)))
    return node, found


def _why_not(conn: Conn, session_id: str, epoch: int | None) -> Exception:
    row = conn.execute(
        "SELECT s.deleted_at IS NOT NULL, h.epoch FROM gr_sessions s"
        " JOIN gr_heads h ON h.session_id = s.session_id WHERE s.session_id = %s",
        (session_id,),
    ).fetchone()
    if row is None or row[0]:
        return SessionNotFound(session_id)
    at = "" if epoch is None else f" at epoch {epoch} (now {row[1]})"
    return NodeFenced(f"this node no longer owns session {session_id}{at}; its write was undone")


def fence(
    conn: Conn,
    lease: Lease,
    node: str,
    inc: int,
    *,
    state: str | None = None,
    last_seq: int | None = None,
) -> None:
    """The fence of an awaited write under ``lease`` (and the head's new ``state``, if any).
    SessionNotFound if the session is gone, NodeFenced if this node lost it."""
    cursor = conn.execute(
        "UPDATE gr_heads SET state = COALESCE(%s, state) WHERE session_id = %s AND epoch = %s"
        " AND owner_node = %s AND owner_inc = %s AND (%s::bigint IS NULL OR last_seq = %s)",
        (state, lease.session_id, lease.epoch, node, inc, last_seq, last_seq),
    )
    if cursor.rowcount == 0:
        raise _why_not(conn, lease.session_id, lease.epoch)


def fence_owner(conn: Conn, session_id: str, node: str, inc: int, state: str | None = None) -> None:
    """The fence of a write that carries no lease: this node's incarnation must own the session."""
    cursor = conn.execute(
        "UPDATE gr_heads SET state = COALESCE(%s, state) WHERE session_id = %s"
        " AND owner_node = %s AND owner_inc = %s",
        (state, session_id, node, inc),
    )
    if cursor.rowcount == 0:
        raise _why_not(conn, session_id, None)


def not_owned_elsewhere(conn: Conn, session_id: str, node: str, inc: int) -> None:
    """The fence of a plain store write (a message, a title, permissions, a delete): refused
    with NodeFenced once another node, or another incarnation of this one, owns the session --
    what a paused node's late write would be after a takeover. A session nobody owns may be
    written. An UPDATE, so a concurrent takeover is waited for and then seen (as ``fence``)."""
    cursor = conn.execute(
        "UPDATE gr_heads SET state = state WHERE session_id = %s"
        " AND (owner_node IS NULL OR (owner_node = %s AND owner_inc = %s))",
        (session_id, node, inc),
    )
    if cursor.rowcount:
        return
    row = conn.execute(
        "SELECT owner_node FROM gr_heads WHERE session_id = %s", (session_id,)
    ).fetchone()
    if row is not None:  # else no such session: the write's own SQL says so
        raise NodeFenced(
            f"node {row[0]} owns session {session_id} now; this node's write was refused"
        )


def require_live_node(conn: Conn, node: str, inc: int) -> None:
    """NodeFenced unless this node has joined and its lease holds (database clock)."""
    row = conn.execute(
        "SELECT incarnation = %s AND lease_until > now() FROM gr_nodes WHERE node_id = %s",
        (inc, node),
    ).fetchone()
    if inc == 0 or row is None or not row[0]:
        raise NodeFenced(f"node {node} has no valid cluster lease (incarnation {inc}); it rejoins")


def claim(conn: Conn, session_id: str, node: str, inc: int) -> Lease:
    """Take ``session_id`` for this node (in one transaction, the caller's): kept at its epoch
    if this incarnation owns it already, taken at epoch + 1 if it is unowned or its owner is
    dead (lease expired, or an old incarnation), else OwnedElsewhere."""
    require_live_node(conn, node, inc)
    # The head row alone, locked: a concurrent claim or delete commits first and this reads
    # its result. (Joined rows would be re-read from the statement's old snapshot after the
    # lock wait, READ COMMITTED's EvalPlanQual: three claimers all took the session.) Each
    # later statement takes a fresh snapshot, after the lock.
    row = conn.execute(
        "SELECT epoch, owner_node, owner_inc, last_seq, state FROM gr_heads"
        " WHERE session_id = %s FOR UPDATE",
        (session_id,),
    ).fetchone()
    gone = conn.execute(
        "SELECT deleted_at IS NOT NULL FROM gr_sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    if row is None or gone is None or gone[0]:
        raise SessionNotFound(session_id)
    epoch, owner, owner_inc, last_seq, state = row
    if owner == node and owner_inc == inc:
        return Lease(session_id, int(epoch), int(last_seq), state)
    if owner is not None:
        live = conn.execute(
            "SELECT advertise_url FROM gr_nodes WHERE node_id = %s AND incarnation = %s"
            " AND lease_until > now()",
            (owner, owner_inc),
        ).fetchone()
        if live is not None:
            raise OwnedElsewhere(
                f"node {owner} owns session {session_id}", owner=owner, owner_url=live[0]
            )
    taken = conn.execute(
        "UPDATE gr_heads SET epoch = epoch + 1, owner_node = %s, owner_inc = %s"
        " WHERE session_id = %s RETURNING epoch, last_seq, state",
        (node, inc, session_id),
    ).fetchone()
    assert taken is not None  # the row is locked by this transaction
    return Lease(session_id, int(taken[0]), int(taken[1]), taken[2])


def release(conn: Conn, lease: Lease, node: str) -> None:
    conn.execute(
        "UPDATE gr_heads SET owner_node = NULL, owner_inc = NULL"
        " WHERE session_id = %s AND epoch = %s AND owner_node = %s",
        (lease.session_id, lease.epoch, node),
    )
