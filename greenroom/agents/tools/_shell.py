"""``shell``: run commands in the working directory, and background jobs (spec §2.4).

Commands run through ``$SHELL -c`` (else ``/bin/sh``), stdin closed, stdout and stderr merged,
each in a new process group (``_process``). Non-zero exits and timeouts are normal results,
as upstream. Environment: the server's environment without its secrets (``_environment``:
greenroom's token, provider keys) with the toolset's ``env`` laid over it, so ``env`` wins on a
duplicate key (upstream lets the parent win; see docs/decisions).

Background jobs write their output to a file in a private temporary directory instead of a
pipe, so no task has to outlive the tool call that started them: ``view_background_job`` reads
the file (first 10 MiB), and the status comes from polling the process. Closing the toolset
(the runtime closes) terminates every running job and removes the directory.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

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
    schema,
    string,
)
from ._environment import scrubbed
from ._expand import expand_env
from ._process import exit_text, go_duration, kill_group, run_captured, spawn
from ._registry import Toolset, register

DEFAULT_TIMEOUT = 30
JOB_OUTPUT_LIMIT = 10 * 1024 * 1024

INSTRUCTIONS = (
    "## Shell\n\n"
    "Commands run with `{shell} -c` in the working directory {root} (use `cwd` for another "
    "directory), without a terminal and without input. Each call is a fresh shell: `cd` and "
    "variables do not carry over. A command is stopped after `timeout` seconds (default 30). "
    "Use run_background_job for servers and other long-running commands, then "
    "view_background_job to read their output and stop_background_job to end them."
)


def toolset_env(config: ToolsetConfig, ctx: ToolContext) -> dict[str, str]:
    """The server's environment without its secrets (``_environment``), with the toolset's
    ``env`` on top (``${env.X}`` expanded from the whole environment: passed on purpose)."""
    raw = config.options.get("env", {})
    if not isinstance(raw, Mapping):
        raise ToolsetError("env must be a mapping of strings")
    env = scrubbed(ctx.env, ctx.secret_env)
    for key, value in raw.items():
        env[str(key)] = expand_env(str(value), ctx.env)
    return env


def _cwd(root: Path, given: object) -> Path:
    if not isinstance(given, str) or given in ("", "."):
        return root
    return (root / given).resolve() if not Path(given).is_absolute() else Path(given)


@attrs.define(eq=False)
class Job:
    id: str
    cmd: str
    cwd: str
    process: trio.Process
    output: Path
    started: float
    ended: float | None = None
    stopped: bool = False

    @property
    def status(self) -> str:
        code = self.process.poll()
        if self.stopped:
            return "stopped"
        if code is None:
            return "running"
        if self.ended is None:
            self.ended = time.monotonic()
        return "completed" if code == 0 else "failed"

    def runtime(self) -> str:
        end = self.ended if self.ended is not None else time.monotonic()
        return go_duration(round(end - self.started))

    def read(self) -> tuple[str, bool]:
        try:
            with self.output.open("rb") as f:
                data = f.read(JOB_OUTPUT_LIMIT + 1)
        except OSError:
            return "", False
        return data[:JOB_OUTPUT_LIMIT].decode(errors="replace"), len(data) > JOB_OUTPUT_LIMIT


class Shell:
    def __init__(self, config: ToolsetConfig, ctx: ToolContext) -> None:
        self.root = ctx.working_dir
        self.env = toolset_env(config, ctx)
        self.shell = ctx.env.get("SHELL") or "/bin/sh"
        self.processes = ctx.processes
        self.jobs: dict[str, Job] = {}
        self._counter = itertools.count(1)
        self._dir: Path | None = None

    async def run(self, args: Mapping[str, Any]) -> ToolResult:
        cmd = str(args.get("cmd", ""))
        if not cmd.strip():
            return error("Error: empty command")
        timeout = args.get("timeout")
        seconds = timeout if isinstance(timeout, int | float) and timeout > 0 else DEFAULT_TIMEOUT
        try:
            done = await run_captured(
                [self.shell, "-c", cmd],
                cwd=_cwd(self.root, args.get("cwd")),
                env=self.env,
                limit=OUTPUT_LIMIT + 1,
                deadline=trio.current_time() + seconds,
                ledger=self.processes,
                label="shell",
            )
        except OSError as exc:
            return error(f"Error starting command: {exc}")
        output = done.output.decode(errors="replace")
        if done.timed_out:
            text = f"Command timed out after {go_duration(seconds)}\nOutput: {output}"
        elif done.returncode:
            text = f"Error executing command: {exit_text(done.returncode)}\nOutput: {output}"
        else:
            text = output
        return ToolResult(limit_output(text.strip()) or "<no output>")

    async def start_job(self, args: Mapping[str, Any]) -> ToolResult:
        cmd = str(args.get("cmd", ""))
        if not cmd.strip():
            return error("Error: empty command")
        given_cwd = str(args.get("cwd") or "")
        job_id = f"job_{int(time.time())}_{next(self._counter)}"
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="greenroom-jobs-"))
        out_path = self._dir / f"{job_id}.out"
        try:
            with out_path.open("wb") as out:
                proc = await spawn(
                    [self.shell, "-c", cmd],
                    cwd=_cwd(self.root, given_cwd),
                    env=self.env,
                    stdout=out,
                    ledger=self.processes,
                    label="run_background_job",
                )
        except OSError as exc:
            return error(f"Error starting background command: {exc}")
        self.jobs[job_id] = Job(job_id, cmd, given_cwd, proc, out_path, time.monotonic())
        return ToolResult(
            f"Background job started with ID: {job_id}\nCommand: {cmd}\n"
            f"Working directory: {given_cwd}"
        )

    async def list_jobs(self, _: Mapping[str, Any]) -> ToolResult:
        await trio.lowlevel.checkpoint()
        lines = ["Background Jobs:\n\n"]
        if not self.jobs:
            lines.append("No background jobs found.\n")
        for job in self.jobs.values():
            status = job.status
            lines.append(f"ID: {job.id}\n  Command: {job.cmd}\n  Status: {status}\n")
            lines.append(f"  Runtime: {job.runtime()}\n")
            if status != "running":
                lines.append(f"  Exit Code: {self._exit_code(job)}\n")
            lines.append("\n")
        return ToolResult("".join(lines))

    async def view_job(self, args: Mapping[str, Any]) -> ToolResult:
        job = self.jobs.get(str(args.get("job_id", "")))
        if job is None:
            return error(f"Job not found: {args.get('job_id', '')}")
        status = job.status
        output, truncated = await trio.to_thread.run_sync(job.read)
        text = f"Job ID: {job.id}\nCommand: {job.cmd}\nStatus: {status}\nRuntime: {job.runtime()}\n"
        if status != "running":
            text += f"Exit Code: {self._exit_code(job)}\n"
        text += "\n--- Output ---\n" + (output or "<no output>\n")
        if truncated:
            text += "\n\n[Output truncated at 10MB limit]"
        return ToolResult(text)

    async def stop_job(self, args: Mapping[str, Any]) -> ToolResult:
        await trio.lowlevel.checkpoint()
        job_id = str(args.get("job_id", ""))
        job = self.jobs.get(job_id)
        if job is None:
            return error(f"Job not found: {job_id}")
        status = job.status
        if status != "running":
            return error(f"Job {job_id} is not running (current status: {status})")
        job.stopped = True
        job.ended = time.monotonic()
        problem = kill_group(job.process)
        if problem:
            return error(f"Job {job_id} marked as stopped, but error killing process: {problem}")
        return ToolResult(f"Job {job_id} stopped successfully")

    @staticmethod
    def _exit_code(job: Job) -> int:
        code = job.process.returncode
        return code if code is not None and code >= 0 else -1

    def close(self) -> None:
        for job in self.jobs.values():
            if job.process.poll() is None:
                job.stopped = True
                kill_group(job.process)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


_CMD = string("The shell command to run")
_CWD = string("The working directory (default: the session's working directory)")
_JOB = string("The ID of the background job")


def _cmd_of(args: Mapping[str, Any]) -> str:
    return str(args.get("cmd", ""))


@register("shell")
def shell_toolset(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
    shell = Shell(config, ctx)
    read_only = ToolAnnotations(read_only=True)
    tools = [
        FunctionTool(
            ToolSpec(
                "shell",
                "Execute a shell command and return its merged stdout and stderr.",
                schema(
                    {
                        "cmd": _CMD,
                        "cwd": _CWD,
                        "timeout": {
                            "type": "integer",
                            "description": "Seconds before the command is stopped (default 30)",
                        },
                    },
                    ("cmd",),
                ),
            ),
            shell.run,
            ToolAnnotations(title="Shell"),
            "shell",
            _cmd_of,
        ),
        FunctionTool(
            ToolSpec(
                "run_background_job",
                "Start a long-running shell command in the background and return its job ID.",
                schema({"cmd": _CMD, "cwd": _CWD}, ("cmd",)),
            ),
            shell.start_job,
            ToolAnnotations(title="Background Job"),
            "shell",
            _cmd_of,
        ),
        FunctionTool(
            ToolSpec(
                "list_background_jobs", "List the background jobs and their status.", schema({})
            ),
            shell.list_jobs,
            read_only,
            "shell",
        ),
        FunctionTool(
            ToolSpec(
                "view_background_job",
                "Show the status and output of a background job.",
                schema({"job_id": _JOB}, ("job_id",)),
            ),
            shell.view_job,
            read_only,
            "shell",
        ),
        FunctionTool(
            ToolSpec(
                "stop_background_job",
                "Stop a running background job (and its child processes).",
                schema({"job_id": _JOB}, ("job_id",)),
            ),
            shell.stop_job,
            ToolAnnotations(),
            "shell",
        ),
    ]
    text = INSTRUCTIONS.format(shell=shell.shell, root=shell.root)
    return Toolset(list(tools), text, shell.close)
