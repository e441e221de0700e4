"""What an agent file asks that this server will not do: the warnings of ``validate`` and ``serve``.

Parsing (``_yaml.py``) reports what is wrong with a file whatever the server. What depends on
this server is checked here, each time from the live tables: a toolset type is served exactly
when ``TOOLSET_BUILDERS`` has a builder for it, and a Docker MCP catalog server
(``ref: docker:NAME``) needs the ``docker`` CLI with its ``mcp`` plugin on ``PATH``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs

from greenroom.errors import AgentConfigError, GreenroomError

from ._config import AUTO_MODEL, AgentFile, ToolsetConfig
from ._yaml import load_agent_file
from .providers._base import ModelConfig
from .providers._facts import facts_for
from .tools import TOOLSET_BUILDERS

DOCKER_PROBE_BUDGET = 10.0
"""Seconds ``docker mcp version`` may take before the plugin counts as missing."""
MCP_CATALOG_URL = "https://desktop.docker.com/mcp/catalog/v3/catalog.yaml"
"""The catalog docker-agent hands to the gateway."""
INSTALL_HINT = (
    "install Docker Desktop, or the docker CLI with the MCP Toolkit plugin (docker-mcp), "
    "so that `docker mcp` runs"
)


@attrs.frozen
class DockerMcp:
    """Whether Docker's MCP gateway can be started here, and what was found."""

    available: bool
    detail: str


def probe_docker_mcp(
    *,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., subprocess.CompletedProcess[Any]] = subprocess.run,
) -> DockerMcp:
    """Look for a ``docker`` CLI on ``PATH`` whose ``mcp`` plugin answers ``docker mcp version``."""
    docker = which("docker")
    if docker is None:
        return DockerMcp(False, "no docker CLI on PATH")
    try:
        done = run(
            [docker, "mcp", "version"],
            capture_output=True,
            timeout=DOCKER_PROBE_BUDGET,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return DockerMcp(False, f"{docker} mcp version failed: {exc}")
    if done.returncode != 0:
        return DockerMcp(
            False,
            f"{docker} has no working mcp plugin (`docker mcp version` exited {done.returncode})",
        )
    return DockerMcp(True, f"{docker} mcp")


@functools.cache
def _probe_once(path: str) -> DockerMcp:
    del path  # the cache key: a changed PATH probes again
    return probe_docker_mcp()


def docker_mcp_here() -> DockerMcp:
    """:func:`probe_docker_mcp` for this process's ``PATH``, probed once per ``PATH``."""
    return _probe_once(os.environ.get("PATH", ""))


def gateway_command(
    server: str, *, secrets_file: str = "", config_file: str = "", docker: str = "docker"
) -> list[str]:
    """The stdio command docker-agent runs for ``ref: docker:<server>``.

    It starts Docker's MCP gateway for that one catalog server; the server's secrets
    (``NAME=value`` lines) and the toolset's ``config`` are handed over in files.
    """
    argv = [docker, "mcp", "gateway", "run", "--servers", server, "--catalog", MCP_CATALOG_URL]
    if secrets_file:
        argv += ["--secrets", secrets_file]
    if config_file:
        argv += ["--config", config_file]
    return argv


def _docker_server(toolset: ToolsetConfig) -> str | None:
    ref = toolset.options.get("ref")
    if toolset.type == "mcp" and isinstance(ref, str) and ref.startswith("docker:"):
        return ref.removeprefix("docker:")
    return None


def diagnose(
    config: AgentFile,
    *,
    builders: Mapping[str, object] | None = None,
    docker: Callable[[], DockerMcp] = docker_mcp_here,
) -> list[str]:
    """Warning lines (``file:line: path: warning: what``) for ``config`` on this server.

    Args:
        config: a parsed agent file (its own parse warnings are included, all in line
            order).
        builders: the toolset table (default: ``TOOLSET_BUILDERS`` as it is now).
        docker: how to find out whether Docker's MCP gateway is here (probed only when a
            toolset needs it).
    """
    table = TOOLSET_BUILDERS if builders is None else builders
    found: list[tuple[int, str]] = []
    for agent in config.agents.values():
        for index, toolset in enumerate(agent.toolsets):
            problems = _toolset_problems(toolset, table, docker)
            if problems:
                where = f"{config.path}:{toolset.line}: agents.{agent.name}.toolsets[{index}]"
                found.append((toolset.line, f"{where}: warning: {'; '.join(problems)}"))
    found += [(_line_of(config.path, text), text) for text in config.warnings]
    return [text for _, text in sorted(found, key=lambda f: f[0])]


def _line_of(path: str, text: str) -> int:
    """The line number of a ``path:line: ...`` warning (0 when there is none)."""
    number = text.removeprefix(f"{path}:").split(":", 1)[0]
    return int(number) if number.isdigit() else 0


def _toolset_problems(
    toolset: ToolsetConfig, table: Mapping[str, object], docker: Callable[[], DockerMcp]
) -> list[str]:
    supported = toolset.type in table
    problems = (
        []
        if supported
        else [f"toolset type {toolset.type!r} is not supported by greenroom yet (left out)"]
    )
    server = _docker_server(toolset)
    if server is None:
        return problems
    gateway = docker()
    if not gateway.available:
        problems.append(
            f"catalog server {server!r} needs Docker's MCP gateway ({gateway.detail}): "
            f"{INSTALL_HINT}"
        )
    elif not supported:
        command = " ".join(gateway_command(server))
        problems.append(f"docker-agent starts it with `{command}`")
    return problems


_FREE_PROVIDERS = frozenset({"scripted", "echo"})
"""Providers that call no model: they have no price or window to know."""


def _models_of(config: AgentFile) -> list[ModelConfig]:
    refs = [*config.models, *(agent.model for agent in config.agents.values())]
    found: dict[str, ModelConfig] = {}
    for ref in dict.fromkeys(refs):
        for part in config.model_choices(ref):
            if part == AUTO_MODEL:
                continue
            try:
                model = config.model_config(part)
            except GreenroomError:
                continue
            found.setdefault(model.ref, model)
    return list(found.values())


def unknown_models(config: AgentFile) -> list[str]:
    """Warnings naming each model of ``config`` whose price or context window nobody knows
    (models.dev has no entry and the file gives no ``cost`` / ``limit``): its calls have a
    null cost, and it is compacted only when the provider says the context overflowed.
    Loads the models.dev data (about 0.1 s, once per process)."""
    lines = []
    for model in _models_of(config):
        if model.provider in _FREE_PROVIDERS:
            continue
        facts = facts_for(model.provider, model.model, model.facts)
        missing = [
            what
            for what, known in (("price", facts.priced), ("context window", facts.context))
            if not known
        ]
        if missing:
            lines.append(
                f"{config.path}: warning: model {model.ref}: no {' or '.join(missing)} known "
                "(set cost/limit on the model): its cost is reported as null"
            )
    return lines


Status = Literal["ok", "warnings", "errors"]


@attrs.frozen
class FileReport:
    """The outcome of checking one agent file."""

    path: str
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    agents: int = 0

    @property
    def status(self) -> Status:
        if self.errors:
            return "errors"
        return "warnings" if self.warnings else "ok"


def check_file(path: str | os.PathLike[str], **options: Any) -> FileReport:
    """Load ``path`` and diagnose it; ``options`` go to :func:`diagnose`."""
    name = os.fspath(path)
    try:
        config = load_agent_file(name)
    except AgentConfigError as exc:
        return FileReport(name, errors=tuple(exc.problems))
    return FileReport(name, warnings=tuple(diagnose(config, **options)), agents=len(config.agents))


def summary(reports: Iterable[FileReport]) -> str:
    """``3 files: 2 ok, 1 with warnings`` (counts of zero left out)."""
    reports = list(reports)
    counts = {
        status: sum(r.status == status for r in reports) for status in ("ok", "warnings", "errors")
    }
    parts = [f"{counts['ok']} ok"] if counts["ok"] else []
    parts += [f"{counts[s]} with {s}" for s in ("warnings", "errors") if counts[s]]
    noun = "file" if len(reports) == 1 else "files"
    return f"{len(reports)} {noun}: {', '.join(parts) or 'none checked'}"
