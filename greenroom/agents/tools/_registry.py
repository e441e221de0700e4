"""The one table from toolset ``type`` to builder, and the tools of an agent built from it.

:data:`TOOLSET_BUILDERS` decides what greenroom supports: a type without a builder is reported
(``greenroom validate`` and a ``warning`` event), never fatal. A builder that fails on its
options raises :class:`ToolsetError`; the toolset is dropped with the upstream warning text
``toolset <type> failed: <error>``. The generic keys every toolset takes (``tools``,
``instruction``, ``defer``) are applied here, after the builder.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._config import AgentConfig, ToolsetConfig
from ..providers._base import ToolSpec
from ._base import Tool, ToolContext
from ._deferred import deferred_tools

log = logging.getLogger(__name__)


class ToolsetError(Exception):
    """A toolset's options are unusable (the message says why, for the warning event)."""


@attrs.define
class Toolset:
    """What a builder returns: tools, the instructions added to the system prompt, cleanup."""

    tools: list[Tool]
    instructions: str = ""
    close: Callable[[], None] | None = None  # synchronous: called when the runtime closes
    start: Callable[[], Awaitable[Toolset]] | None = None
    """For toolsets that need I/O to list their tools: run before the next model call (and
    retried before the following one if it fails); its result's tools are added then."""


ToolsetBuilder = Callable[[ToolsetConfig, ToolContext], Toolset]

TOOLSET_BUILDERS: dict[str, ToolsetBuilder] = {}
"""Toolset ``type`` → builder; a type is supported exactly when it has an entry here."""


def register(kind: str) -> Callable[[ToolsetBuilder], ToolsetBuilder]:
    def add(builder: ToolsetBuilder) -> ToolsetBuilder:
        TOOLSET_BUILDERS[kind] = builder
        return builder

    return add


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

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self.tools.values())

    def activate(self, name: str) -> Tool | None:
        """Move deferred tool ``name`` into the offered tools; None when unknown."""
        tool = self.deferred.pop(name, None)
        if tool is not None:
            self.tools.setdefault(name, tool)
        return tool

    def add(self, toolset: ToolsetConfig, built: Toolset) -> None:
        """Offer (or defer) the tools of ``built``, applying the generic toolset keys."""
        if built.close is not None:
            self.closers.append(built.close)
        if built.start is not None:
            self.starters.append((toolset, built.start))
        keep = _listed(toolset.options, "tools")
        text = _instructions(toolset.options, built.instructions)
        if text:
            self.instructions.append(text)
        defer = toolset.options.get("defer")
        for tool in built.tools:
            name = tool.spec.name
            if keep is not None and name not in keep:
                continue
            if defer is True or (isinstance(defer, list | tuple) and name in defer):
                self.deferred.setdefault(name, tool)
            elif name not in self.tools:
                self.tools[name] = tool

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
        for tool in deferred_tools(out):
            out.tools.setdefault(tool.spec.name, tool)
    out.unavailable = tuple(unavailable)
    return out


ToolsFor = Callable[[AgentConfig, ToolContext], AgentTools]
"""How a runtime gets an agent's tools (tests and embedders can add their own)."""


def default_tools_for(agent: AgentConfig, context: ToolContext | None = None) -> AgentTools:
    return build_tools(agent.toolsets, context)


def names(tools: Sequence[Tool]) -> list[str]:
    return [t.spec.name for t in tools]
