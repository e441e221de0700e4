"""Child processes of tools: each in a new process group, killed as a group.

A command runs in its own session (``start_new_session``), so its process group holds the
shell, its children and their children. A timeout or a cancelled turn sends SIGTERM to the
whole group and returns at once, without waiting for the processes to exit (as upstream). The
killed processes are reaped later: every new spawn polls the ones killed before, so none stays
a zombie for longer than the next command.

No group outlives the server (issue 23): each is watched by the watchdog process
(``_watchdog``), which kills it when the server dies, and recorded through the toolset's
:class:`ProcessLedger` (the store's process log), so a restart kills what is left
(:func:`kill_recorded_group`). A group stays watched and recorded until it is empty; every
spawn looks for the groups that emptied since.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import trio

from . import _watchdog
from ._base import ProcessLedger

log = logging.getLogger(__name__)
_unreaped: list[trio.Process] = []
_live: dict[int, ProcessLedger | None] = {}  # pgid -> where it is recorded


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (None: no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _running_members(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs (zombies do not count: they are dead, waiting
    for a parent to collect them)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return _group_alive(pgid)  # no /proc: assume the group may run
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


async def forget_ended() -> None:
    """Reap exited children and forget (watchdog, ledger) the groups that have emptied."""
    reap()
    for pgid, ledger in list(_live.items()):
        if _group_alive(pgid):
            continue
        del _live[pgid]
        _watchdog.release(pgid)
        if ledger is not None:
            try:
                await ledger.ended(pgid)
            except Exception as exc:  # a stale record: the next start checks it and drops it
                log.warning("tool process group %d not forgotten: %s", pgid, exc)


def kill_recorded_group(pgid: int, ticks: int) -> bool:
    """SIGKILL group ``pgid`` left by an earlier server; whether anything was killed.

    A live leader must have started at ``ticks`` (else the pid was reused: left alone). With
    the leader gone, the group's other members still hold the pgid, which the kernel does not
    hand out while they live, so they are the group's.
    """
    if pgid <= 1:
        return False
    leader = start_ticks(pgid)
    if leader is not None and leader != ticks:
        return False
    if not _running_members(pgid):  # only zombies (an init that does not reap): nothing runs
        return False
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        return False
    return True


def reap() -> None:
    """Collect exit statuses of killed processes that have exited by now."""
    _unreaped[:] = [proc for proc in _unreaped if proc.poll() is None]


def kill_group(proc: trio.Process) -> str:
    """SIGTERM the process group of ``proc``; returns an error text, "" on success."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # the whole group is gone already
    except OSError as exc:
        return str(exc)
    if proc not in _unreaped:
        _unreaped.append(proc)
    return ""


def exit_text(returncode: int) -> str:
    """Go's ``exec.ExitError`` text: ``exit status N`` or ``signal: <name>``."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
    return "signal: " + {"SIGTERM": "terminated", "SIGKILL": "killed", "SIGINT": "interrupt"}.get(
        name, name.lower().removeprefix("sig")
    )


def go_duration(seconds: float) -> str:
    """``30s``, ``2m0s``, ``1h0m0s``: the text Go prints for a duration."""
    whole = int(seconds)
    if whole != seconds or whole < 60:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s"


@attrs.frozen
class Finished:
    output: bytes
    returncode: int | None  # None: timed out and killed
    timed_out: bool = False


async def spawn(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    stdout: int | object,
    ledger: ProcessLedger | None = None,
    label: str = "",
) -> trio.Process:
    """Start ``argv`` in a new process group with stdin closed and stderr merged; the group is
    watched (killed if the server dies) and recorded in ``ledger``."""
    await forget_ended()
    proc = await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=stdout,  # type: ignore[arg-type]
        stderr=subprocess.STDOUT,
        cwd=str(cwd),
        env=dict(env),
        start_new_session=True,
    )
    await track(proc, ledger, label)
    return proc


async def track(proc: trio.Process, ledger: ProcessLedger | None, label: str) -> None:
    """Watch the group ``proc`` leads (killed if the server dies) and record it in ``ledger``;
    call it right after starting ``proc`` in a new session (hooks start theirs with pipes of
    their own)."""
    _live[proc.pid] = ledger  # no checkpoint since the start: a cancel cannot lose the group
    _watchdog.watch(proc.pid)
    if ledger is not None:
        try:
            await ledger.started(proc.pid, start_ticks(proc.pid) or 0, label)
        except Exception as exc:  # the store failed: the watchdog still covers the group
            log.warning("tool process group %d not recorded: %s", proc.pid, exc)


async def run_captured(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    limit: int,
    deadline: float = float("inf"),
    ledger: ProcessLedger | None = None,
    label: str = "",
) -> Finished:
    """Run ``argv`` to completion, keeping the first ``limit`` bytes of its merged output.

    Waits for the process to exit *and* for its output pipe to close (a child that keeps the
    pipe open holds the call, as upstream). On the deadline the group is killed and the output
    so far returned; when the caller is cancelled the group is killed and Cancelled propagates.

    Raises:
        OSError: the command could not be started.
    """
    proc = await spawn(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, ledger=ledger, label=label)
    buffer = bytearray()
    stream = proc.stdout
    assert stream is not None

    async def pump() -> None:
        async with stream:
            while chunk := await stream.receive_some(65536):
                if len(buffer) < limit:
                    buffer.extend(chunk[: limit - len(buffer)])

    finished = False
    try:
        with trio.move_on_at(deadline):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump)
                await proc.wait()
            finished = True
    finally:
        if not finished:
            kill_group(proc)
            if isinstance(stream, trio.lowlevel.FdStream):
                with contextlib.suppress(trio.ClosedResourceError, OSError):
                    stream.close()  # sync: safe in a cancelled task
    if not finished:
        return Finished(bytes(buffer), None, timed_out=True)
    return Finished(bytes(buffer), proc.returncode)
