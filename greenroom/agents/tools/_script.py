"""``script``: commands the agent's author wrote, one tool each, with typed arguments (§2.5).

Each entry of ``shell:`` becomes a tool. Its arguments reach the command as environment
variables (``$name``), never spliced into the command text, so an argument cannot inject shell
syntax. Commands run like ``shell`` commands (own process group, killed when the turn is
cancelled) in the entry's ``working_dir`` (relative to the working directory), without a
timeout, as upstream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import (
    OUTPUT_LIMIT,
    FunctionTool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolsetError,
    error,
    limit_output,
)
from ._process import exit_text, run_captured
from ._registry import Toolset, register
from ._shell import toolset_env

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _arg_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value)


def _entry(name: str, raw: Any) -> tuple[str, str, dict[str, Any], list[str], str]:
    if not NAME.match(name):
        raise ToolsetError(f"invalid tool name {name!r}")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("cmd"), str) or not raw["cmd"]:
        raise ToolsetError(f"tool '{name}' needs a cmd")
    cmd = str(raw["cmd"])
    args = raw.get("args") or {}
    if not isinstance(args, Mapping):
        raise ToolsetError(f"tool '{name}': args must be a mapping")
    properties: dict[str, Any] = {}
    for arg, prop in args.items():
        spec = dict(prop) if isinstance(prop, Mapping) else {}
        spec.setdefault("type", "string")
        properties[str(arg)] = spec
    used = {a or b for a, b in VARIABLE.findall(cmd)}
    undefined = sorted(used - set(properties))
    if undefined:
        raise ToolsetError(f"tool '{name}' uses undefined args: {undefined}")
    required = raw.get("required")
    required_list = [str(r) for r in required] if isinstance(required, list | tuple) else []
    missing = [r for r in required_list if r not in properties]
    if missing:
        raise ToolsetError(f"tool '{name}' requires undeclared args: {missing}")
    description = str(raw.get("description") or f"Execute shell command: {cmd}")
    return cmd, description, properties, required_list, str(raw.get("working_dir") or "")


def _fixed(cmd: str) -> Callable[[Mapping[str, Any]], str]:
    """A script tool always runs its author's command (the arguments are variables)."""
    return lambda _args: cmd


@register("script")
def script_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    entries = config.options.get("shell")
    if not isinstance(entries, Mapping) or not entries:
        raise ToolsetError("shell must map tool names to commands")
    env = toolset_env(config, ctx)
    shell = ctx.env.get("SHELL") or "/bin/sh"
    tools = []
    lines = ["## Scripts", ""]
    for name, raw in entries.items():
        cmd, description, properties, required, workdir = _entry(str(name), raw)
        cwd = (
            ctx.working_dir / workdir
            if workdir and not Path(workdir).is_absolute()
            else Path(workdir or ctx.working_dir)
        )

        def make(cmd: str = cmd, cwd: Path = cwd, label: str = str(name)) -> Any:
            async def run(args: Mapping[str, Any]) -> ToolResult:
                call_env = {**env, **{k: _arg_text(v) for k, v in args.items() if v is not None}}
                try:
                    done = await run_captured(
                        [shell, "-c", cmd],
                        cwd=cwd,
                        env=call_env,
                        limit=OUTPUT_LIMIT + 1,
                        ledger=ctx.processes,
                        label=label,
                    )
                except OSError as exc:
                    return error(f"Error executing command '{cmd}': {exc}\nOutput: ")
                output = limit_output(done.output.decode(errors="replace"))
                if done.returncode:
                    assert done.returncode is not None
                    why = exit_text(done.returncode)
                    return error(f"Error executing command '{cmd}': {why}\nOutput: {output}")
                return ToolResult(output)

            return run

        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            parameters["required"] = required
        tools.append(
            FunctionTool(
                ToolSpec(str(name), description, parameters),
                make(),
                ToolAnnotations(),
                "",
                _fixed(cmd),
            )
        )
        lines.append(f"### {name}\n{description}")
        for arg, prop in properties.items():
            lines.append(f"- {arg}: {prop.get('description', '')}")
    return Toolset(list(tools), "\n".join(lines))
