"""The agents ``greenroom serve`` serves: its agent sources (loaded, with their warnings), what
``GET /api/agents`` shows of them, and the runtime factory that builds a session's runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

from greenroom.agents import (
    AgentSources,
    LocalRuntimeFactory,
    McpSettings,
    OAuthFlows,
    default_tools_for,
)
from greenroom.agents._diagnose import diagnose, unknown_models
from greenroom.agents._remote_sources import RemoteSources
from greenroom.agents._source_refs import RemoteRef, catalog_reference, remote_ref
from greenroom.agents.providers import ModelClients
from greenroom.agents.tools import EgressPolicy, ProcessLedger, parse_networks
from greenroom.errors import AgentConfigError, AgentSourceUnavailable, ConfigError

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
    return check_sources(AgentSources.from_paths(paths) if paths else AgentSources.bundled())


def check_sources(sources: AgentSources) -> tuple[AgentSources, list[str]]:
    """Load every source once (all faults in one error); their warnings."""
    # Every fault of every file at once, in one error (the sources' own loader would log each
    # one too: printed twice).
    sources.check_all()
    warnings: list[str] = []
    for key in sources.keys():  # noqa: SIM118
        config = sources.get(key)
        warnings.extend(diagnose(config))
        warnings.extend(unknown_models(config))
    return sources, warnings


def split_sources(paths: tuple[str, ...]) -> tuple[tuple[str, ...], list[RemoteRef]]:
    """The local paths and the remote sources (URLs, OCI references) of ``paths``.

    Raises:
        ConfigError: an ``oci://`` argument that is not a reference.
    """
    local: list[str] = []
    remote: list[RemoteRef] = []
    for path in paths:
        try:
            ref = remote_ref(path)
        except ValueError as exc:
            raise ConfigError(f"agent source {exc}") from None
        if ref is None:
            local.append(path)
        else:
            remote.append(ref)
    return tuple(local), remote


async def open_sources(cfg: ServeConfig) -> tuple[AgentSources, list[str], RemoteSources]:
    """The agent sources ``cfg`` names, local and remote (fetched once, or read from their
    cache), their warnings, and the remote sources (to refresh every ``--pull-interval``).

    Raises:
        ConfigError: a remote source cannot be fetched and has no cached copy.
        AgentConfigError: a file is missing or wrong.
    """
    paths, refs = split_sources(cfg.agent_paths)
    # ``greenroom serve agentcatalog/pirate``: the catalog --agent-catalog names.
    refs = [
        attrs.evolve(ref, text=catalog_reference(ref.text, cfg.agent_catalog))
        if ref.kind == "oci"
        else ref
        for ref in refs
    ]
    policy = EgressPolicy(parse_networks(cfg.allow_private_networks))
    remote = RemoteSources(refs, Path(data_dir(cfg)) / "agent-sources", policy, cfg.agent_catalog)
    if paths or not refs:
        local = await trio.to_thread.run_sync(load_sources_files, paths)
    else:
        local = {}
    warnings = await remote.start(local)
    files = dict(local)
    for key, path in remote.files().items():
        if key in files:
            raise AgentConfigError(
                [f"{remote.states[key].ref.text}: agent source key {key!r} is also used by "
                 f"{files[key]}"]
            )  # fmt: skip
        files[key] = path
    sources = AgentSources(files, external=remote.external)
    sources.origin_of = remote.row
    sources, more = await trio.to_thread.run_sync(check_sources, sources)
    return sources, [*warnings, *more], remote


def load_sources_files(paths: tuple[str, ...]) -> dict[str, Path]:
    """The local agent files of ``paths`` by key (the bundled agent when none is given)."""
    return (AgentSources.from_paths(paths) if paths else AgentSources.bundled()).files()


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
