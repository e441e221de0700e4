"""The one table from toolset ``type`` to builder, and the tools of an agent built from it.

:data:`TOOLSET_BUILDERS` decides what greenroom supports: a type without a builder is reported
(``greenroom validate`` and a ``warning`` event), never fatal. A builder that fails on its
options raises :class:`ToolsetError`; the toolset is dropped with the upstream warning text
``toolset <type> failed: <error>``. The generic keys every toolset takes (``tools``,
``instruction``, ``defer``) are applied here, after the builder.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from .._config import AgentConfig, ToolsetConfig
from ..providers._base import ToolSpec
from ._base import Tool, ToolContext, ToolsetError
from ._deferred import deferred_tools
from ._described import described
from ._skills import build_skills
from ._skills_remote import is_remote, load_skills
from ._toon import toon_patterns, with_toon

log = logging.getLogger(__name__)


class LiveTools(Protocol):
    """A toolset whose tools change while the runtime runs (an MCP server's)."""

    @property
    def version(self) -> int:
        """Bumped whenever :meth:`current` would answer differently."""

    def current(self) -> tuple[list[Tool], str]:
        """The tools now, and the instructions now."""

    async def ensure_started(self) -> str:
        """Start (or retry) what the tools need; "" when ready, else a warning text."""


@attrs.define
class Toolset:
    """What a builder returns: tools, the instructions added to the system prompt, cleanup."""

    tools: list[Tool]
    instructions: str = ""
    close: Callable[[], None] | None = None  # synchronous: called when the runtime closes
    start: Callable[[], Awaitable[Toolset]] | None = None
    """For toolsets that need I/O to list their tools: run before the next model call (and
    retried before the following one if it fails); its result's tools are added then."""
    live: LiveTools | None = None
    """For toolsets whose tools change (MCP): started before each turn, read again when their
    version changed (``tools`` and ``instructions`` are then ignored)."""


ToolsetBuilder = Callable[[ToolsetConfig, ToolContext], Toolset]

BUILDER_MODULES: Mapping[str, str] = {
    "a2a": "greenroom.agents.tools._a2a",
    "api": "greenroom.agents.tools._api",
    "background_agents": "greenroom.agents._background_tools",
    "fetch": "greenroom.agents.tools._fetch",
    "filesystem": "greenroom.agents.tools._filesystem",
    "mcp": "greenroom.agents.mcp._toolset",
    "memory": "greenroom.agents.tools._memory",
    "model_picker": "greenroom.agents.tools._model_picker",
    "openapi": "greenroom.agents.tools._openapi",
    "script": "greenroom.agents.tools._script",
    "shell": "greenroom.agents.tools._shell",
    "tasks": "greenroom.agents.tools._tasks",
    "think": "greenroom.agents.tools._think",
    "todo": "greenroom.agents.tools._todo",
    "lsp": "greenroom.agents.tools._lsp",
    "rag": "greenroom.agents.tools._rag",
    "user_prompt": "greenroom.agents.tools._user_prompt",
}
"""Where each toolset type's builder lives: its module registers it (``@register``) when it is
imported, which happens on the first lookup of that type (so the MCP SDK, httpx and the HTML
converters load only for an agent that uses ``mcp``, ``fetch``, ``api`` or ``openapi``)."""


class Builders(Mapping[str, ToolsetBuilder]):
    """Toolset ``type`` → builder, each builder's module imported on its first lookup.

    Membership and iteration never import: a type is known when it has a module (or has been
    registered).
    """

    def __init__(self, modules: Mapping[str, str]) -> None:
        self._modules = dict(modules)
        self._loaded: dict[str, ToolsetBuilder] = {}

    def add(self, kind: str, builder: ToolsetBuilder) -> None:
        self._loaded[kind] = builder
        self._modules.setdefault(kind, builder.__module__)

    def __getitem__(self, kind: str) -> ToolsetBuilder:
        found = self._loaded.get(kind)
        if found is None:
            module = self._modules[kind]  # KeyError: an unknown type
            importlib.import_module(module)
            found = self._loaded.get(kind)
            if found is None:
                raise KeyError(kind)
        return found

    def __contains__(self, kind: object) -> bool:
        return kind in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


TOOLSET_BUILDERS = Builders(BUILDER_MODULES)
"""Toolset ``type`` → builder; a type is supported exactly when it has an entry here."""


def register(kind: str) -> Callable[[ToolsetBuilder], ToolsetBuilder]:
    def add(builder: ToolsetBuilder) -> ToolsetBuilder:
        TOOLSET_BUILDERS.add(kind, builder)
        return builder

    return add


@attrs.define(eq=False)
class _Entry:
    config: ToolsetConfig
    built: Toolset
    seen: int = -1  # the live version the offered tools were read at


@attrs.define(eq=False)
class AgentTools:
    """The tools of one agent for one runtime.

    ``tools`` are offered to the model, in toolset order; ``deferred`` ones are only found
    through ``search_tool`` and moved into ``tools`` by ``add_tool``. ``unavailable`` lists
    types without a builder, ``warnings`` toolsets that failed to build.
    """

    tools: dict[str, Tool] = attrs.field(factory=dict)
    unavailable: tuple[str, ...] = ()
    warnings: list[str] = attrs.field(factory=list)
    instructions: list[str] = attrs.field(factory=list)
    deferred: dict[str, Tool] = attrs.field(factory=dict)
    closers: list[Callable[[], None]] = attrs.field(factory=list)
    starters: list[tuple[ToolsetConfig, Callable[[], Awaitable[Toolset]]]] = attrs.field(
        factory=list
    )
    entries: list[_Entry] = attrs.field(factory=list)
    activated: list[str] = attrs.field(factory=list)
    describe: bool = False
    """``add_description_parameter``: the tools upstream marks get a ``description`` argument."""
    model_overrides: dict[str, str] = attrs.field(factory=dict)
    """Offered tool name → its toolset's ``model`` (the model of the call after its results)."""
    code_mode: Callable[[dict[str, Tool]], dict[str, Tool]] | None = None
    """``code_mode_tools``: turns the offered tools into what code mode offers instead
    (``agents/_codemode.py``); applied whenever the offered tools are computed."""

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self.tools.values())

    @property
    def has_live(self) -> bool:
        return any(entry.built.live is not None for entry in self.entries)

    def activate(self, name: str) -> Tool | None:
        """Move deferred tool ``name`` into the offered tools; None when unknown."""
        tool = self.deferred.pop(name, None)
        if tool is not None:
            self.activated.append(name)
            if self.code_mode is None:
                self.tools.setdefault(name, tool)
            else:
                self._rebuild()  # the code-mode tool wraps it
        return tool

    def wrap_in_code_mode(self, offer: Callable[[dict[str, Tool]], dict[str, Tool]]) -> None:
        """Offer what ``offer`` makes of the tools from now on (see :attr:`code_mode`)."""
        self.code_mode = offer
        self._rebuild()

    def add(self, toolset: ToolsetConfig, built: Toolset) -> None:
        """Offer (or defer) the tools of ``built``, applying the generic toolset keys."""
        if built.close is not None:
            self.closers.append(built.close)
        if built.start is not None:
            self.starters.append((toolset, built.start))
        self.entries.append(_Entry(toolset, built))
        self._rebuild()

    def _rebuild(self) -> None:
        """Compute the offered and deferred tools and the instructions from the entries."""
        tools: dict[str, Tool] = {}
        deferred: dict[str, Tool] = {}
        instructions: list[str] = []
        overrides: dict[str, str] = {}
        for entry in self.entries:
            toolset, built = entry.config, entry.built
            offered, original = built.tools, built.instructions
            if built.live is not None:
                offered, original = built.live.current()
                entry.seen = built.live.version
            keep = _listed(toolset.options, "tools")
            text = _instructions(toolset.options, original)
            if text:
                instructions.append(text)
            defer = toolset.options.get("defer")
            toon = _toon_of(toolset)
            model = toolset.options.get("model")
            for tool in offered:
                name = tool.spec.name
                if keep is not None and name not in keep:
                    continue
                tool = with_toon(tool, toon) if toon else tool
                if isinstance(model, str) and model and name not in overrides:
                    overrides[name] = model
                if defer is True or (isinstance(defer, list | tuple) and name in defer):
                    deferred.setdefault(name, tool)
                elif name not in tools:
                    tools[name] = tool
                elif callable(joined := getattr(tools[name], "joined", None)):
                    tools[name] = joined(tool)  # lsp: one tool for every server (by file type)
        for name in self.activated:
            if name in deferred:
                tools.setdefault(name, deferred.pop(name))
        if self.describe:
            tools = {name: described(tool) for name, tool in tools.items()}
        if self.code_mode is not None:
            tools = self.code_mode(tools)
        self.tools, self.deferred, self.instructions = tools, deferred, instructions
        self.model_overrides = overrides

    def model_after(self, names: Iterable[str]) -> str:
        """The ``model`` of the first of the called tools whose toolset has one ("" if none):
        docker-agent's per-toolset routing of the model call that reads their results."""
        for name in names:
            if name in self.model_overrides:
                return self.model_overrides[name]
        return ""

    def refresh(self) -> bool:
        """Read the live toolsets again if any changed; True when the tools changed."""
        if all(e.built.live is None or e.built.live.version == e.seen for e in self.entries):
            return False
        before = [tool.spec for tool in self.tools.values()]
        self._rebuild()
        return before != [tool.spec for tool in self.tools.values()]

    async def start(self) -> list[str]:
        """Start the toolsets that wait for it; returns warnings for those that failed."""
        warnings: list[str] = []
        pending, self.starters = self.starters, []
        for toolset, start in pending:
            try:
                built = await start()
            except ToolsetError as exc:
                warnings.append(f"{toolset.type} start failed: {exc}")
                self.starters.append((toolset, start))  # retried before the next model call
                continue
            self.add(toolset, built)
        return warnings

    async def start_live(self) -> list[str]:
        """Start (or retry) every live toolset, concurrently; returns their warnings."""
        lives = [e.built.live for e in self.entries if e.built.live is not None]
        warnings: list[str] = [""] * len(lives)

        async def one(index: int, live: LiveTools) -> None:
            warnings[index] = await live.ensure_started()

        async with trio.open_nursery() as nursery:
            for index, live in enumerate(lives):
                nursery.start_soon(one, index, live)
        return [w for w in warnings if w]

    def close(self) -> None:
        closers, self.closers = self.closers, []
        for close in closers:
            try:
                close()
            except Exception:
                log.exception("closing a toolset failed")


def _listed(options: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    value = options.get(key)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _toon_of(toolset: ToolsetConfig) -> tuple[re.Pattern[str], ...]:
    try:
        return toon_patterns(toolset.options.get("toon"))
    except re.error:  # refused when the file is read; a bad pattern here takes nothing
        return ()


def _instructions(options: Mapping[str, Any], original: str) -> str:
    custom = options.get("instruction")
    if not isinstance(custom, str) or not custom:
        return original
    return custom.replace("{ORIGINAL_INSTRUCTIONS}", original, 1)


def build_tools(
    toolsets: Iterable[ToolsetConfig],
    context: ToolContext | None = None,
    builders: Mapping[str, ToolsetBuilder] | None = None,
) -> AgentTools:
    """The tools of ``toolsets``; the first tool of a name wins (upstream's documented rule)."""
    table = TOOLSET_BUILDERS if builders is None else builders
    ctx = context if context is not None else ToolContext()
    out = AgentTools()
    unavailable: list[str] = []
    wants_deferred = False
    for toolset in toolsets:
        builder = table.get(toolset.type)
        if builder is None:
            unavailable.append(toolset.type)
            continue
        try:
            built = builder(toolset, ctx)
        except ToolsetError as exc:
            out.warnings.append(f"toolset {toolset.type} failed: {exc}")
            continue
        out.add(toolset, built)
        defer = toolset.options.get("defer")
        wants_deferred = wants_deferred or bool(defer)
    if wants_deferred:
        out.add(ToolsetConfig(type="deferred"), Toolset(deferred_tools(out)))
    out.unavailable = tuple(unavailable)
    return out


ToolsFor = Callable[[AgentConfig, ToolContext], AgentTools]
"""How a runtime gets an agent's tools (tests and embedders can add their own)."""


def default_tools_for(agent: AgentConfig, context: ToolContext | None = None) -> AgentTools:
    """The tools of ``agent``'s toolsets, its skills, with the description parameter if asked."""
    tools = build_tools(agent.toolsets, context)
    if agent.rag:  # one search tool per source (agent files have no ``type: rag`` toolset)
        rag = build_tools([ToolsetConfig("rag", {"source": s}) for s in agent.rag], context)
        for entry in rag.entries:
            tools.add(entry.config, entry.built)
        tools.warnings.extend(rag.warnings)
    if agent.skills:
        ctx = context if context is not None else ToolContext()
        if any(is_remote(source) for source in agent.skills):
            tools.add(ToolsetConfig(type="skills"), Toolset([], start=_remote_skills(agent, ctx)))
        else:
            found, text = build_skills(agent.skills, ctx)
            if found:
                tools.add(ToolsetConfig(type="skills"), Toolset(found, instructions=text))
    if agent.add_description_parameter:
        tools.describe = True
        tools._rebuild()
    return tools


def _remote_skills(agent: AgentConfig, ctx: ToolContext) -> Callable[[], Awaitable[Toolset]]:
    """Skills with a remote source are read before the next model call (network I/O)."""

    async def start() -> Toolset:
        home = Path(ctx.env.get("HOME") or Path.home())
        cache = Path(ctx.data_dir) / "skills"
        found, text = await load_skills(agent.skills, Path(ctx.working_dir), home, cache)
        return Toolset(found, instructions=text)

    return start


def names(tools: Sequence[Tool]) -> list[str]:
    return [t.spec.name for t in tools]
