"""Crash recovery: repair every session whose turn (or tool rerun) was running when the process
died, before the server takes requests.

Per session, in one transaction (``Writer.apply_recovery``):

- each running turn ends ``interrupted``, with a ``turn_interrupted`` event;
- the text the turn streamed after its last stored message (what subscribers saw: the committed
  deltas) becomes one assistant message marked interrupted;
- every tool call of the history that has no result gets one: a call whose intent was committed
  may have run, so it is *in doubt*: a placeholder result, a ``tool_call_in_doubt`` event, and
  the session's state ``needs_decision`` until a person decides it; a call that never started
  gets a result saying so. No tool call dangles, and nothing runs again by itself;
- an error item in the history says what happened.

``plan_recovery`` decides all of that from what is stored and does no I/O; ``recover`` reads,
plans and writes, session by session. The same steps serve a later takeover by another node.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

import attrs

from greenroom.agents import INTERRUPTED_NOTE
from greenroom.domain import (
    ChatMessage,
    ErrorItem,
    Event,
    FunctionCall,
    Item,
    Message,
    StreamStopped,
    ToolCall,
    ToolCallInDoubt,
    TurnInterrupted,
    utcnow,
)
from greenroom.observe import metrics
from greenroom.persistence import (
    EventRow,
    Lease,
    Persistence,
    RecoveryPlan,
    StoredEvent,
    ToolCallRecord,
    TurnRecord,
)

from ._entries import LogEntry
from ._processes import host_id, kill_leftover_groups
from ._runs import webhook_delivery

log = logging.getLogger(__name__)

IN_DOUBT_RESULT = (
    "The server stopped while this tool call was running: whether it ran is unknown. "
    "It waits for a person's decision (rerun, done or skip)."
)
NEVER_RAN_RESULT = "The tool call did not run: the server stopped before it started."
READ_PAGE = 1000


@attrs.frozen
class RecoveryReport:
    sessions: int = 0
    turns_interrupted: int = 0
    calls_in_doubt: int = 0
    groups_killed: int = 0  # tool process groups the last server left running

    def summary(self) -> str:
        turns = "turn" if self.turns_interrupted == 1 else "turns"
        calls = "call" if self.calls_in_doubt == 1 else "calls"
        text = (
            f"{self.turns_interrupted} {turns} interrupted, "
            f"{self.calls_in_doubt} tool {calls} in doubt"
        )
        if self.groups_killed:
            groups = "group" if self.groups_killed == 1 else "groups"
            text += f", {self.groups_killed} tool process {groups} killed"
        return text


def unresolved_calls(items: tuple[Item, ...]) -> dict[str, tuple[ToolCall, str]]:
    """Tool calls of the history with no result after them: id -> (call, agent name)."""
    open_calls: dict[str, tuple[ToolCall, str]] = {}
    for item in items:
        if not isinstance(item, Message):
            continue
        if item.role == "assistant":
            for call in item.message.tool_calls:
                open_calls[call.id] = (call, item.agent_name)
        elif item.role == "tool":
            open_calls.pop(item.message.tool_call_id, None)
    return open_calls


def _tool_result(call_id: str, text: str, agent_name: str, now: dt.datetime) -> Message:
    chat = ChatMessage("tool", text, tool_call_id=call_id, is_error=True, created_at=now)
    return Message(chat, agent_name=agent_name)


def _folded_text(deltas: list[StoredEvent]) -> tuple[str, str, str]:
    """(text, reasoning, agent name) of the streamed deltas, in order."""
    text: list[str] = []
    reasoning: list[str] = []
    agent = ""
    for stored in deltas:
        if stored.type not in ("agent_choice", "agent_choice_reasoning"):
            continue
        body = LogEntry.stored(stored).json()
        content = body.get("content")
        if not isinstance(content, str):
            continue
        (text if stored.type == "agent_choice" else reasoning).append(content)
        agent = body.get("agent_name") or agent
    return "".join(text), "".join(reasoning), agent


def plan_recovery(
    lease: Lease,
    items: tuple[Item, ...],
    turns: list[TurnRecord],
    started: list[ToolCallRecord],
    deltas: list[StoredEvent],
    *,
    reason: str = "server_restart",
    now: dt.datetime | None = None,
    created_at: float | None = None,
) -> RecoveryPlan:
    """What recovery writes for one session (see the module docstring)."""
    now = now or utcnow()
    sid = lease.session_id
    plan_items: list[tuple[Message | ErrorItem, str]] = []
    by_id = {record.tool_call_id: record for record in started}
    in_doubt: list[ToolCallRecord] = []
    for call_id, (_, agent) in unresolved_calls(items).items():
        record = by_id.get(call_id)
        if record is None:  # its intent never committed: it did not start
            plan_items.append((_tool_result(call_id, NEVER_RAN_RESULT, agent, now), ""))
            continue
        in_doubt.append(record)
        if not record.placeholder_id:
            placeholder = _tool_result(call_id, IN_DOUBT_RESULT, record.agent_name or agent, now)
            plan_items.append((placeholder, call_id))
    # A rerun that was running: the call already has its placeholder in the history.
    in_doubt += [r for r in started if r.placeholder_id and r not in in_doubt]

    agent_name = turns[-1].agent_name if turns else ""
    text, reasoning, streamed_by = _folded_text(deltas)
    if text or reasoning:
        content = f"{text}\n\n{INTERRUPTED_NOTE}" if text else INTERRUPTED_NOTE
        chat = ChatMessage("assistant", content, reasoning_content=reasoning, created_at=now)
        plan_items.append((Message(chat, agent_name=streamed_by or agent_name), ""))

    what = "a turn was running" if turns else "a tool call was running again"
    doubt = f"; {len(in_doubt)} tool call(s) in doubt wait for a decision" if in_doubt else ""
    error = ErrorItem(
        f"The server stopped while {what}: it was interrupted{doubt}.",
        "turn_interrupted",
        agent_name,
        now,
    )
    plan_items.append((error, ""))

    events: list[Event] = [TurnInterrupted(t.turn_id, reason, sid, len(in_doubt)) for t in turns]
    for record in in_doubt:
        call = ToolCall(record.tool_call_id, FunctionCall(record.name, record.arguments))
        events.append(ToolCallInDoubt(call, record.started_at, record.agent_name, sid))
    if turns:
        events.append(StreamStopped(sid, agent_name, "interrupted"))
    stamp = time.time() if created_at is None else created_at
    entries = [LogEntry.of(lease.last_seq + n, e) for n, e in enumerate(events, 1)]
    rows = tuple(EventRow(sid, e.seq, lease.epoch, e.type, e.data, stamp) for e in entries)
    # An interrupted run that asked for a webhook gets its delivery now (issue 25).
    ended = [attrs.evolve(t, state="interrupted", reason=reason, ended_at=now) for t in turns]
    deliveries = tuple(d for d in map(webhook_delivery, ended) if d is not None)
    return RecoveryPlan(
        lease=lease,
        items=tuple(plan_items),
        events=rows,
        in_doubt=tuple(r.tool_call_id for r in in_doubt),
        interrupted_turns=tuple(t.turn_id for t in turns),
        reason=reason,
        ended_at=now,
        deliveries=deliveries,
    )


async def _deltas_after(persistence: Persistence, session_id: str, after: int) -> list[StoredEvent]:
    found: list[StoredEvent] = []
    while True:
        page = await persistence.events.read_events(session_id, after, READ_PAGE)
        found += [e for e in page if e.type in ("agent_choice", "agent_choice_reasoning")]
        if len(page) < READ_PAGE:
            return found
        after = page[-1].seq


async def recover_session(
    persistence: Persistence,
    session_id: str,
    *,
    reason: str = "server_restart",
    lease: Lease | None = None,
) -> RecoveryPlan:
    """Repair one session left running (see the module docstring); the plan it wrote.
    ``lease``: the session is claimed already (a takeover), else it is claimed here."""
    if lease is None:
        lease = await persistence.ownership.claim(session_id)
    session = await persistence.store.get_session(session_id)
    turns = await persistence.events.turns(session_id, ("running",))
    started = await persistence.events.tool_calls(session_id, ("started",))
    deltas = await _deltas_after(persistence, session_id, turns[-1].text_seq) if turns else []
    plan = plan_recovery(lease, session.items, turns, started, deltas, reason=reason)
    await persistence.writer.apply_recovery(plan)
    for record in (r for r in started if r.tool_call_id in plan.in_doubt):
        metrics().tool_ended(record.name, "in_doubt")
    return plan


async def recover(persistence: Persistence, host: str | None = None) -> RecoveryReport:
    """Repair every session whose turn or rerun was running when the last process stopped.

    First every tool process group the last process recorded on ``host`` (default: this
    machine) and left running is killed, so no call listed in doubt is still running."""
    killed = await kill_leftover_groups(persistence.process_log, host or host_id())
    report = RecoveryReport(groups_killed=killed)
    for session_id in await persistence.events.interrupted_sessions():
        plan = await recover_session(persistence, session_id)
        log.warning(
            "session %s: %d turn(s) interrupted, %d tool call(s) in doubt",
            session_id,
            len(plan.interrupted_turns),
            len(plan.in_doubt),
        )
        report = RecoveryReport(
            report.sessions + 1,
            report.turns_interrupted + len(plan.interrupted_turns),
            report.calls_in_doubt + len(plan.in_doubt),
            killed,
        )
    return report
