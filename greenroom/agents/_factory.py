"""LocalRuntimeFactory: builds a LocalRuntime and its title generator for a session."""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Mapping
from pathlib import Path

from greenroom.domain import Session
from greenroom.errors import AgentConfigError, AgentSourceUnavailable, GreenroomError

from ._local import LocalRuntime
from ._models import ProviderFor
from ._runtime import BuiltRuntime
from ._sources import AgentSources
from ._titles import ModelTitleGenerator
from .providers import ModelClients, make_provider, resolve_auto
from .providers._base import ModelConfig, Provider
from .tools import ToolContext, ToolsFor, default_tools_for
from .tools._base import McpSettings, ProcessLedger
from .tools._egress_policy import PUBLIC_ONLY, EgressPolicy

log = logging.getLogger(__name__)


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/greenroom`` (``~/.local/share/greenroom``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "greenroom"


class LocalRuntimeFactory:
    """A :class:`~greenroom.agents.RuntimeFactory` of LocalRuntimes over agent sources.

    Args:
        sources: the agent files, by key.
        env: environment for API keys and the ``auto`` model (default: ``os.environ``, read
            live; a mapping given here is copied).
        provider_for: makes a model's provider (default: ``providers.make_provider`` with
            ``env`` and the agent file's directory).
        auto_model: what ``auto`` stands for (default: ``providers.resolve_auto(env)``).
        tools_for: the tools of an agent (default: built from its ``toolsets``).
        data_dir: greenroom's data directory (``memory`` databases live under it).
        confirmation_timeout: seconds a tool confirmation waits before it is rejected
            (None: no timeout).
        mcp: how MCP servers are run (timeouts, OAuth flows and redirect URI, ``docker``).
        titles: False: no session gets a title written by a model (``greenroom serve
            --no-titles``); an agent file can also turn them off (``runtime.titles``).
        max_session_cost: USD a session may spend on model calls (0: no budget).
        clients: the model endpoints' pooled HTTP clients, shared by every runtime this
            factory builds (its owner opens and closes it: ``serve`` does, around the
            registry); None: each model call opens a client of its own.
        processes: where tool process groups are recorded (``serve``: the store's process
            log, so a restart kills what a crash left running).
        egress: where network tools may connect (``serve --allow-private-network``).
    """

    def __init__(
        self,
        sources: AgentSources,
        *,
        env: Mapping[str, str] | None = None,
        provider_for: ProviderFor | None = None,
        auto_model: ModelConfig | None = None,
        tools_for: ToolsFor = default_tools_for,
        data_dir: str | os.PathLike[str] | None = None,
        confirmation_timeout: float | None = None,
        mcp: McpSettings | None = None,
        titles: bool = True,
        clients: ModelClients | None = None,
        max_session_cost: float = 0.0,
        processes: ProcessLedger | None = None,
        egress: EgressPolicy = PUBLIC_ONLY,
    ) -> None:
        self._sources = sources
        self._titles = titles
        self._clients = clients
        # os.environ itself, not a copy: keys are read when each model call starts, so a key
        # set after the server started is used by the next run.
        self._env: Mapping[str, str] = os.environ if env is None else dict(env)
        self._provider_for = provider_for
        self._auto = auto_model
        self._tools_for = tools_for
        self._data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self._confirmation_timeout = confirmation_timeout
        self._max_session_cost = max_session_cost
        self.mcp = mcp or McpSettings()
        self._processes = processes
        self._egress = egress
        self._env_snapshot: Mapping[str, str] = types.MappingProxyType({})

    @property
    def sources(self) -> AgentSources:
        return self._sources

    async def build(self, source: str, agent_name: str, session: Session) -> BuiltRuntime:
        """Build a runtime for ``session`` from source ``source``, starting on ``agent_name``.

        The agent is ``agent_name``, else ``root``, else the first declared. The session's
        stored model overrides are re-applied (a failing one is logged and skipped).

        Raises:
            AgentNotFound: unknown source or agent.
            AgentSourceUnavailable: the source's file has never loaded successfully.
        """
        try:
            config = self._sources.get(source)
        except AgentConfigError as exc:  # the file never loaded: the source is unusable
            raise AgentSourceUnavailable(str(exc)) from exc
        agent = config.agent(agent_name)
        auto = self._auto_model()
        provider_for = self._provider_for or self._default_provider_for(Path(config.path).parent)
        runtime = LocalRuntime(
            config,
            provider_for=provider_for,
            agent=agent.name,
            auto_model=auto,
            tools_for=self._tools_for,
            tool_context=ToolContext(
                working_dir=session.working_dir or os.getcwd(),
                data_dir=self._data_dir,
                agent_file=config.path,
                env=self._tool_env(),
                mcp=self.mcp,
                processes=self._processes,
                egress=self._egress,
                secret_env=frozenset(m.token_key for m in config.models.values() if m.token_key),
            ),
            confirmation_timeout=self._confirmation_timeout,
            custom_models=session.custom_models_used,
            max_session_cost=self._max_session_cost,
        )
        for name, ref in session.agent_model_overrides.items():
            try:
                await runtime.set_agent_model(name, ref)
            except GreenroomError as exc:
                log.warning(
                    "session %s: model override %s=%r skipped: %s", session.id, name, ref, exc
                )
        titles = None
        if self._titles and config.titles:
            titles = ModelTitleGenerator(runtime.title_models, provider_for)
        return BuiltRuntime(runtime, titles, agent.safety or config.safety)

    def _tool_env(self) -> Mapping[str, str]:
        """The environment as it is now, read-only, shared by the runtimes built while it does
        not change (a copy per session cost ~5 KB each)."""
        current = dict(self._env)
        if current != self._env_snapshot:
            self._env_snapshot = types.MappingProxyType(current)
        return self._env_snapshot

    def _auto_model(self) -> ModelConfig:
        if self._auto is None:
            self._auto, explanation = resolve_auto(self._env)
            log.info("model 'auto' is %s: %s", self._auto.ref, explanation)
        return self._auto

    def _default_provider_for(self, base_dir: Path) -> ProviderFor:
        env = self._env
        clients = self._clients

        def provider_for(model: ModelConfig) -> Provider:
            return make_provider(model, env=env, base_dir=base_dir, clients=clients)

        return provider_for
