"""The agents ``greenroom serve`` serves: its agent sources (loaded, with their warnings), what
``GET /api/agents`` shows of them, and the runtime factory that builds a session's runtime."""

from __future__ import annotations

from typing import Any

import trio

from greenroom.agents import (
    AgentSources,
    LocalRuntimeFactory,
    McpSettings,
    OAuthFlows,
    default_tools_for,
)
from greenroom.agents._diagnose import diagnose, unknown_models
from greenroom.agents.providers import ModelClients
from greenroom.agents.tools import EgressPolicy, ProcessLedger, parse_networks
from greenroom.errors import AgentConfigError, AgentSourceUnavailable

from ._config import ServeConfig, data_dir


class SourcesCatalog:
    """What GET /api/agents shows, read from the agent sources."""

    def __init__(self, sources: AgentSources) -> None:
        self.sources = sources

    def list_agents(self) -> list[dict[str, Any]]:
        return [entry.to_json() for entry in self.sources.list()]

    def agent_config(self, source: str) -> dict[str, Any]:
        try:
            return self.sources.get_json(source)
        except AgentConfigError as exc:  # the file never loaded: the source is unusable
            raise AgentSourceUnavailable(str(exc)) from exc

    async def tool_count(self, source: str, agent_name: str) -> int:
        await trio.lowlevel.checkpoint()
        return len(default_tools_for(self._agent(source, agent_name)).specs)

    def check_agent(self, source: str, agent_name: str) -> None:
        self._agent(source, agent_name)

    def _agent(self, source: str, agent_name: str) -> Any:
        try:
            return self.sources.get(source).agent(agent_name)
        except AgentConfigError as exc:  # the file never loaded: the source is unusable
            raise AgentSourceUnavailable(str(exc)) from exc


def load_sources(paths: tuple[str, ...]) -> tuple[AgentSources, list[str]]:
    """Agent sources from files and directories (or the bundled agent), and their warnings.

    Every file must load; the warnings (``file:line: path: warning: what``) say what the
    files ask that this server will not do.
    """
    sources = AgentSources.from_paths(paths) if paths else AgentSources.bundled()
    # Every fault of every file at once, in one error (the sources' own loader would log each
    # one too: printed twice).
    sources.check_all()
    warnings: list[str] = []
    for key in sources.keys():  # noqa: SIM118
        config = sources.get(key)
        warnings.extend(diagnose(config))
        warnings.extend(unknown_models(config))
    return sources, warnings


def runtime_factory(
    cfg: ServeConfig,
    sources: AgentSources,
    oauth: OAuthFlows | None = None,
    clients: ModelClients | None = None,
    processes: ProcessLedger | None = None,
) -> LocalRuntimeFactory:
    mcp = McpSettings(
        start_timeout=cfg.mcp_start_timeout,
        call_timeout=cfg.mcp_call_timeout,
        oauth=oauth,
        oauth_redirect_uri=cfg.mcp_oauth_redirect_uri,
    )
    return LocalRuntimeFactory(
        sources,
        data_dir=data_dir(cfg),
        confirmation_timeout=cfg.confirmation_timeout,
        max_session_cost=cfg.max_session_cost,
        mcp=mcp,
        titles=cfg.titles,
        clients=clients,
        processes=processes,
        egress=EgressPolicy(parse_networks(cfg.allow_private_networks)),
    )
