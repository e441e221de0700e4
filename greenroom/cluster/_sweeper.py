"""The sweeper: sessions whose owner died mid-turn are claimed and repaired promptly.

Every node sweeps. ``Membership.sweep`` names the sessions with a non-idle head whose owner's
lease expired; each is claimed through the registry, whose claim runs crash recovery (the turn
ends ``interrupted``, tool calls are left in doubt), and then given up again unless something
here uses it. Another node that is faster wins the claim: OwnedElsewhere, skipped.
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from greenroom.errors import GreenroomError, NodeFenced, OwnedElsewhere, SessionNotFound
from greenroom.persistence import Membership

log = logging.getLogger(__name__)


class Adopter(Protocol):
    fenced: bool

    async def adopt(self, session_id: str) -> None: ...


async def sweep_once(membership: Membership, registry: Adopter) -> list[str]:
    """One sweep; the sessions this node repaired."""
    if registry.fenced:
        return []
    try:
        found = await membership.sweep()
    except GreenroomError as exc:
        log.warning("sweep failed: %s", exc)
        return []
    adopted = []
    for session_id in found:
        try:
            await registry.adopt(session_id)
        except (OwnedElsewhere, SessionNotFound):
            continue  # another sweeper was faster, or the session is gone
        except NodeFenced:
            break
        except GreenroomError as exc:
            log.warning("sweeping session %s failed: %s", session_id, exc)
            continue
        adopted.append(session_id)
    if adopted:
        log.warning("took over %d session(s) left running by dead nodes", len(adopted))
    return adopted


async def sweeper(membership: Membership, registry: Adopter, interval: float) -> None:
    while True:
        await trio.sleep(interval)
        await sweep_once(membership, registry)
