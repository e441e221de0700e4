"""The invariant checker on hand-made data: it passes a sound history and names each kind of
violation (so a cluster test that passes it has really been checked)."""

from __future__ import annotations

import datetime as dt

import attrs
import pytest

from tests.cluster._checker import (
    ClientLog,
    Expectations,
    Head,
    Snapshot,
    StoredEvent,
    Turn,
    check,
    digest,
)

pytestmark = pytest.mark.cluster

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def events(*epochs: int, kinds: dict[int, str] | None = None) -> list[StoredEvent]:
    kinds = kinds or {}
    return [
        StoredEvent(seq, epoch, kinds.get(seq, "agent_choice"), digest(f"body {seq}"))
        for seq, epoch in enumerate(epochs, start=1)
    ]


def sound() -> Snapshot:
    return Snapshot(
        events={"s1": events(1, 1, 2, 2), "s2": events(1, 1, kinds={2: "session_exited"})},
        heads={
            "s1": Head(2, "n2", 1, 4, "running"),
            "s2": Head(3, None, None, 2, "idle"),
        },
        turns=[Turn("s1", "t1", 1, "interrupted"), Turn("s1", "t2", 2, "running")],
        deleted_at={"s1": None, "s2": NOW},
        live_nodes={("n2", 1)},
    )


def seen(name: str, session_id: str, *seqs: int, gaps: frozenset[int] = frozenset()) -> ClientLog:
    return ClientLog(name, session_id, tuple((s, digest(f"body {s}")) for s in seqs), gaps)


EXPECT = Expectations(
    deleted=frozenset({"s2"}),
    side_effects=(("c1", 10), ("c2", 10), ("c2", 11)),
    reruns={"c2": 1},
)


def test_a_sound_history_passes() -> None:
    clients = [seen("a", "s1", 1, 2, 3, 4), seen("b", "s1", 1, 2), seen("c", "s2", 1, 2)]
    assert check(sound(), clients, EXPECT) == []


def test_a_decreasing_epoch_is_two_writers() -> None:
    snapshot = sound()
    snapshot.events["s1"] = events(1, 2, 1, 2)
    assert any("two writers" in p for p in check(snapshot, [], EXPECT))


def test_two_running_turns_and_a_dead_owner() -> None:
    snapshot = sound()
    snapshot.turns.append(Turn("s1", "t3", 2, "running"))
    snapshot.live_nodes = {("n2", 2)}  # n2 re-joined: incarnation 1 is dead
    problems = check(snapshot, [], EXPECT)
    assert any("2 running turns" in p for p in problems)
    assert any("not live" in p for p in problems)
    assert not any(
        "not live" in p for p in check(snapshot, [], attrs.evolve(EXPECT, quiescent=False))
    )


def test_a_lost_or_changed_event() -> None:
    lost = seen("a", "s1", 1, 2, 3, 4, 5)
    changed = ClientLog("b", "s1", ((1, digest("something else")),))
    problems = check(sound(), [lost, changed], EXPECT)
    assert any("got seq 5, not in gr_events" in p for p in problems)
    assert any("seq 1 differs" in p for p in problems)


def test_holes_in_the_stored_log() -> None:
    snapshot = sound()
    del snapshot.events["s1"][1]
    assert any("seqs missing" in p for p in check(snapshot, [], EXPECT))
    assert check(snapshot, [], attrs.evolve(EXPECT, retention_gaps=True)) == []
    snapshot.heads["s1"] = Head(2, "n2", 1, 3, "running")
    assert any("beyond last_seq" in p for p in check(snapshot, [], EXPECT))


def test_client_duplicates_reorders_and_unexplained_holes() -> None:
    problems = check(sound(), [seen("a", "s1", 1, 2, 2), seen("b", "s1", 1, 3)], EXPECT)
    assert any("a s1: seq 2 after 2" in p for p in problems)
    assert any("b s1: hole 1 -> 3" in p for p in problems)
    assert check(sound(), [seen("b", "s1", 1, 3, gaps=frozenset({1}))], EXPECT) == []


def test_resurrection_after_a_delete() -> None:
    snapshot = sound()
    snapshot.deleted_at["s2"] = None
    snapshot.events["s2"].append(StoredEvent(3, 3, "user_message", digest("x")))
    problems = check(snapshot, [], EXPECT)
    assert any("deleted_at is cleared" in p for p in problems)
    assert any("after session_exited" in p for p in problems)
    del snapshot.deleted_at["s2"], snapshot.events["s2"]
    problems = check(snapshot, [], EXPECT)
    assert any("row is gone" in p for p in problems)
    assert any("without a session_exited" in p for p in problems)


def test_a_tool_call_run_twice_without_a_rerun() -> None:
    expect = attrs.evolve(EXPECT, side_effects=(*EXPECT.side_effects, ("c1", 11), ("c2", 12)))
    problems = check(sound(), [], expect)
    assert problems == [
        "tool call c1 ran 2 times (0 reruns decided)",
        "tool call c2 ran 3 times (1 reruns decided)",
    ]
