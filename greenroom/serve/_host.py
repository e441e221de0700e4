"""The agents of ``greenroom serve mcp`` and ``greenroom serve acp``: the store, the model
clients and the session registry opened as ``greenroom serve`` opens them (without HTTP), the
agents they expose, and one turn driven to its end (decision 0031).

A turn runs in a session of the registry, through its actor and the real runtime, so the
session, its events and its approvals are stored, and permission rules decide each tool call;
a call that asks is answered by the protocol's own question to its client (``decide``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import trio

from greenroom.actors import (
    Registry,
    StoreProcessLedger,
    host_id,
    open_registry,
    recover,
)
from greenroom.agents import AgentSources, ResumeRequest
from greenroom.agents.providers import open_model_clients
from greenroom.domain import (
    ChatMessage,
    ErrorEvent,
    Event,
    Message,
    Session,
    ToolCallConfirmation,
)
from greenroom.errors import ConfigError, GreenroomError

from ._agents import open_sources, runtime_factory
from ._config import ServeConfig, check_config
from ._store import open_store

log = logging.getLogger("greenroom.modes")

FORGET_WITHIN = 5.0  # seconds a deletion of a finished call's session may take

Decide = Callable[[ToolCallConfirmation], Awaitable[ResumeRequest]]
OnEvent = Callable[[Event], Awaitable[None]]


@attrs.frozen
class ExposedAgent:
    """One agent of one agent file, as a protocol names it."""

    name: str  # the agent's name, or ``<source>.<agent>`` when two files share it
    source: str
    agent_name: str
    description: str


@attrs.frozen
class TurnOutcome:
    """How a turn ended: its final answer (the last assistant message), or its errors."""

    answer: str
    errors: tuple[str, ...] = ()
    cancelled: bool = False


@attrs.frozen
class AgentHost:
    """The registry and the agents one server mode serves."""

    cfg: ServeConfig
    sources: AgentSources
    registry: Registry

    def agents(self) -> list[ExposedAgent]:
        """Every agent of every file; a name two files share is qualified by its source."""
        found: list[tuple[str, str, str]] = []
        for source in self.sources.keys():  # noqa: SIM118
            for name, agent in self.sources.get(source).agents.items():
                found.append((source, name, agent.description))
        counts: dict[str, int] = {}
        for _, name, _ in found:
            counts[name] = counts.get(name, 0) + 1
        return [
            ExposedAgent(name if counts[name] == 1 else f"{source}.{name}", source, name, text)
            for source, name, text in found
        ]

    async def new_session(
        self, *, title: str, working_dir: str = "", tools_approved: bool = False
    ) -> str:
        session = Session.new(title=title, working_dir=working_dir, tools_approved=tools_approved)
        return (await self.registry.create(session)).id

    async def forget(self, session_id: str) -> None:
        """Delete a session nobody can read again: with sessions in memory (``--db
        :memory:``) a long-lived server would otherwise keep every one (shielded, bounded)."""
        if self.cfg.db != ":memory:":
            return
        with trio.CancelScope(shield=True), trio.move_on_after(FORGET_WITHIN):
            try:
                await self.registry.delete(session_id)
            except GreenroomError as exc:
                log.info("session %s not deleted: %s", session_id, exc)

    async def run_turn(
        self,
        session_id: str,
        agent: ExposedAgent,
        text: str,
        *,
        decide: Decide,
        on_event: OnEvent | None = None,
    ) -> TurnOutcome:
        """Run one turn of ``agent`` on ``text`` to its end.

        ``decide`` answers each tool call that asks for approval; ``on_event`` sees every
        event of the turn (sub-sessions' included). Cancelling the caller cancels the turn.

        Raises:
            GreenroomError: the turn could not start (the session is busy, the runtime could
                not be built, ...).
        """
        handle = self.registry.session(session_id)
        message = ChatMessage(role="user", content=text)
        errors: list[str] = []
        async with await handle.run(
            agent.source, (message,), agent_name=agent.agent_name
        ) as stream:
            async for entry in stream:
                event = entry.event
                if on_event is not None:
                    await on_event(event)
                if isinstance(event, ErrorEvent):
                    errors.append(event.error)
                elif isinstance(event, ToolCallConfirmation):  # a sub-agent's asks here too
                    answer = await decide(event)
                    try:
                        await handle.resume(answer)
                    except GreenroomError as exc:  # the turn ended meanwhile (cancelled)
                        log.info("answer to %s not taken: %s", event.tool_call.id, exc)
        snapshot = await handle.snapshot()
        return TurnOutcome(last_answer(snapshot.session), tuple(errors))


def last_answer(session: Session) -> str:
    """The content of the session's last assistant message ("" when there is none)."""
    for item in reversed(session.items):
        if isinstance(item, Message) and item.role == "user":
            return ""
        if isinstance(item, Message) and item.role == "assistant" and item.content:
            return item.content
    return ""


@asynccontextmanager
async def open_host(cfg: ServeConfig) -> AsyncIterator[AgentHost]:
    """Load the agents, open the store (crash recovery first), the model clients and the
    registry; on leaving, cancel running turns and let every actor persist.

    Raises:
        ConfigError: a PostgreSQL ``--db`` (a cluster node serves HTTP: ``greenroom serve``).
        AgentConfigError: an agent file is missing or wrong.
    """
    if cfg.cluster:
        raise ConfigError(
            "--db: the server modes keep sessions in SQLite or in memory; a PostgreSQL "
            "cluster is served by `greenroom serve` (give --db PATH or :memory:)"
        )
    check_config(cfg)
    sources, warnings, _ = await open_sources(cfg)  # URLs and OCI too, fetched once
    for line in warnings:
        print(line, file=sys.stderr, flush=True)  # stdout is the protocol's
    async with open_store(cfg.db) as persistence:
        host = host_id("")
        report = await recover(persistence, host)
        log.debug("recovery: %s", report.summary())
        processes = StoreProcessLedger(persistence.process_log, host)
        async with (
            open_model_clients() as clients,
            open_registry(
                persistence, runtime_factory(cfg, sources, None, clients, processes)
            ) as registry,
        ):
            try:
                yield AgentHost(cfg, sources, registry)
            finally:
                registry.cancel_turns()


def turn_error_text(exc: GreenroomError) -> str:
    """An error that stopped a turn before it ran, for a person."""
    return f"{type(exc).__name__}: {exc}"
