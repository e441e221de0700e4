"""What every tool is: a spec the model sees, annotations that drive approval, and a call.

A :class:`Tool` has a :class:`~greenroom.agents.providers._base.ToolSpec` (name, description,
JSON-schema parameters), :class:`ToolAnnotations` (MCP's hints: ``readOnlyHint`` tools run
without asking by default), a ``category`` and an async ``call`` taking the decoded arguments.
Builders get a :class:`ToolContext` saying where the session works and how to reach the user.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from greenroom.domain import Event

from .._elicitation import ElicitationAnswer
from .._oauth_flows import OAuthFlows
from .._tool_values import Image as Image, ToolResult as ToolResult, error as error
from ..providers._base import ToolSpec
from ._egress_policy import PUBLIC_ONLY, EgressPolicy

OUTPUT_LIMIT = 30_000
"""Bytes of output a shell, script or API tool returns before it is truncated (upstream)."""
TRUNCATED_NOTE = "\n\n[Output truncated: exceeded 30,000 character limit]"


def limit_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes (on a character boundary) plus the upstream note."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[:limit].decode(errors="ignore") + TRUNCATED_NOTE


@attrs.frozen
class ToolAnnotations:
    """MCP tool annotations; ``read_only`` tools run without confirmation by default."""

    title: str = ""
    read_only: bool = False
    destructive: bool | None = None
    idempotent: bool = False
    open_world: bool | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.title:
            out["title"] = self.title
        if self.read_only:
            out["readOnlyHint"] = True
        if self.destructive is not None:
            out["destructiveHint"] = self.destructive
        if self.idempotent:
            out["idempotentHint"] = True
        if self.open_world is not None:
            out["openWorldHint"] = self.open_world
        return out


READ_ONLY = ToolAnnotations(read_only=True)


class Tool(Protocol):
    @property
    def spec(self) -> ToolSpec: ...

    @property
    def annotations(self) -> ToolAnnotations: ...

    @property
    def category(self) -> str: ...

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Run the tool; return an error result (or raise) when it fails."""


ToolHandler = Callable[[Mapping[str, Any]], Awaitable[ToolResult | str]]
CommandOf = Callable[[Mapping[str, Any]], str]


@attrs.frozen
class FunctionTool:
    """A tool backed by an async function returning the output (or a :class:`ToolResult`)."""

    spec: ToolSpec
    handler: ToolHandler
    annotations: ToolAnnotations = ToolAnnotations()
    category: str = ""
    # For a tool that runs a process: the shell command text a call with these arguments runs
    # (permission rules apply to its parsed simple commands, agents/_permissions.py).
    command: CommandOf | None = None

    @property
    def needs_confirmation(self) -> bool:
        return not self.annotations.read_only

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        result = await self.handler(arguments)
        return result if isinstance(result, ToolResult) else ToolResult(result)


def command_of(tool: object, arguments: Mapping[str, Any] | None) -> str | None:
    """The shell command a call of ``tool`` runs, or None for a tool that runs no process."""
    command = getattr(tool, "command", None)
    if not callable(command):
        return None
    return str(command(arguments or {}))


def tool_definition(tool: Tool) -> dict[str, Any]:
    """The JSON ``tool_definition`` carried by tool events (spec §1.1)."""
    spec = tool.spec
    out: dict[str, Any] = {"name": spec.name}
    if tool.category:
        out["category"] = tool.category
    if spec.description:
        out["description"] = spec.description
    out["parameters"] = dict(spec.parameters)
    out["annotations"] = tool.annotations.to_json()
    return out


def schema(
    properties: Mapping[str, Mapping[str, Any]],
    required: tuple[str, ...] = (),
    *,
    closed: bool = True,
) -> dict[str, Any]:
    """A parameters schema: ``required`` as given, no extra properties unless ``closed=False``."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": {k: dict(v) for k, v in properties.items()},
    }
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


def string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


class ToolsetError(Exception):
    """A toolset's options are unusable (the message says why, for the warning event)."""


class ServicesUnavailable(Exception):
    """The runtime runs no background services (it is not being served by a session)."""


class ToolHost(Protocol):
    """What a runtime offers the tools it runs: user questions, the model picker, background
    services (MCP connections live there) and events outside any turn."""

    async def elicit(
        self,
        message: str,
        *,
        schema: Any = None,
        meta: Mapping[str, Any] | None = None,
        mode: str = "form",
        url: str = "",
    ) -> ElicitationAnswer:
        """Ask the user (an ``elicitation_request``); returns their answer."""

    async def change_model(self, ref: str) -> str:
        """Use model ``ref`` for the current agent; returns the ref now used."""

    async def revert_model(self) -> None: ...

    def start_service(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` as a child of the runtime's service nursery (it lives as long as the
        runtime is served). Raises ServicesUnavailable when the runtime is not served."""

    def notify(self, event: Event) -> None:
        """Report ``event`` from outside a tool call (a server died, an authorization ended):
        it goes to the running turn's stream, else to the session's event log."""


def process_cwd() -> Path:
    return Path(os.getcwd())


@attrs.frozen
class McpSettings:
    """How MCP servers are run.

    Args:
        start_timeout: seconds a start (spawn or connect, initialize, list) may take before
            the agent goes on without the server (the attempt continues in the background).
        call_timeout: seconds one tool call may take; then it is a tool error.
        oauth: the flows that wait for an OAuth redirect (None: OAuth is refused).
        oauth_redirect_uri: where the authorization server sends the user back.
        oauth_timeout: seconds an OAuth flow waits for the redirect.
        docker: the ``docker`` command Docker MCP catalog servers are started with.
        restart_backoff: seconds before each restart of a server that died.
        max_line: bytes one JSON-RPC line of a local server may take.
        egress: where a remote server may be (set per toolset from the context's policy).
    """

    start_timeout: float = 30.0
    call_timeout: float = 300.0
    oauth: OAuthFlows | None = None
    oauth_redirect_uri: str = ""
    oauth_timeout: float = 600.0
    docker: str = "docker"
    restart_backoff: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    max_line: int = 8 * 1024 * 1024
    egress: EgressPolicy = PUBLIC_ONLY  # where remote servers may be (the toolset's policy)


class ProcessLedger(Protocol):
    """Where tool process groups are recorded while they live (the store's process log)."""

    async def started(self, pgid: int, start_ticks: int, label: str) -> None: ...

    async def ended(self, pgid: int) -> None: ...


@attrs.frozen
class ToolContext:
    """What a toolset builder may use.

    Args:
        working_dir: the session's working directory (confinement root of ``filesystem``).
        data_dir: greenroom's data directory (``memory`` databases live under it).
        agent_file: path of the agent file (names per-agent state such as memory).
        agent_name: the agent the tools belong to.
        env: the environment shell-like tools start from (and ``${env.X}`` expands from).
        host: the runtime, for tools it manages (None where no runtime runs them).
        mcp: how MCP servers are run.
        egress: where network tools may connect (public addresses, plus the networks the
            operator allows: ``--allow-private-network``).
        secret_env: more variables tool processes do not inherit (the models' ``token_key``;
            greenroom's own and the providers' keys are always left out).
        processes: where tool process groups are recorded (None: nowhere; the watchdog
            still kills them when the server dies).
    """

    working_dir: Path = attrs.field(factory=process_cwd, converter=Path)
    data_dir: Path = attrs.field(
        factory=lambda: Path.home() / ".local/share/greenroom", converter=Path
    )
    agent_file: str = ""
    agent_name: str = ""
    env: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))
    host: ToolHost | None = None
    mcp: McpSettings = McpSettings()
    processes: ProcessLedger | None = None
    secret_env: frozenset[str] = frozenset()
    egress: EgressPolicy = PUBLIC_ONLY
