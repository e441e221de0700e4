"""The slash commands of ``greenroom chat`` (``/help`` lists them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from greenroom.client import ApiError

if TYPE_CHECKING:
    from ._app import ChatApp

HELP = """commands:
  /sessions            list sessions            /open N   open session N of the list
  /new                 start a new session      /fork N   fork before your Nth message
  /title TEXT          rename this session      /star     star or unstar it
  /agent [NAME]        show or pick the agent   /model [REF]  show or pick the model
  /steer TEXT          steer a running turn     /followup TEXT  queue for after the turn
  /cancel              cancel a running turn    /help, /quit
While a turn runs, a line you type steers it (the prompt says steer>); Ctrl-C or /cancel
cancels it; Ctrl-D quits."""


class Quit(Exception):
    """Raised by ``/quit``: the chat loop ends."""


Command = Callable[["ChatApp", TaskGroup, str], Awaitable[None]]


async def _help(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    for line in HELP.splitlines():
        app.out.line(line)
    await anyio.lowlevel.checkpoint()


async def _quit(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    await anyio.lowlevel.checkpoint()
    raise Quit


async def _sessions(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    app.listed = (await app.client.sessions())[:20]
    if not app.listed:
        app.out.note("no sessions yet")
    app.print_sessions()


async def _open(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    if not app.listed:
        app.listed = (await app.client.sessions())[:20]
    if not arg.isdigit() or not 1 <= int(arg) <= len(app.listed):
        app.out.error("usage: /open N (a number from /sessions)")
        return
    await app.open(tasks, app.listed[int(arg) - 1]["id"])


async def _new(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    await app.new_session(tasks)


async def _fork(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    if not arg.isdigit() or int(arg) < 1:
        app.out.error("usage: /fork N (fork before your Nth message, from 1)")
        return
    forked = await app.client.fork(app.session_id, int(arg) - 1)
    app.out.note("forked:")
    await app.open(tasks, forked["id"])


async def _title(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    if not arg:
        app.out.error("usage: /title TEXT")
        return
    await app.client.set_title(app.session_id, arg)
    app.title = arg
    app.out.note(f"title: {arg}")


async def _star(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    listed = {s["id"]: s for s in await app.client.sessions()}
    starred = not listed.get(app.session_id, {}).get("starred", False)
    await app.client.set_starred(app.session_id, starred)
    app.out.note("starred" if starred else "unstarred")


async def _agent(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    sources = await app.client.agents()
    if not arg:
        for source in sources:
            mark = "*" if app.run_agent.partition("/")[0] == source["name"] else " "
            app.out.line(f"{mark} {source['name']}: {source.get('description', '')}")
        return
    if arg.partition("/")[0] not in {s["name"] for s in sources}:
        app.out.error(f"no agent source {arg.partition('/')[0]!r} (/agent lists them)")
        return
    app.agent = arg
    if app.session_agent and app.session_agent != arg:
        # Decision 0019: a session keeps its agent; another agent is another session.
        app.out.note(f"agent: {arg} for new sessions (/new); this one runs {app.session_agent}")
        return
    app.out.note(f"agent: {arg} (from the next turn)")


async def _model(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    if arg:
        app.model = arg
        app.out.note(f"model: {arg} (from the next turn)")
        return
    try:
        picker = await app.client.models(app.session_id)
    except ApiError as exc:
        app.out.note(f"no model picker yet ({exc.message}); run a turn first")
        return
    running = app.running_model
    for model in picker.get("models", []):
        mark = "*" if model.get("is_current") else " "
        now = ""
        if model.get("is_current") and running and running != model["ref"]:
            now = f", now {running}"  # "auto" resolves to a model when the runtime is built
        app.out.line(f"{mark} {model['ref']}  ({model['name']}{now})")
    if running:
        app.out.note(f"the last turn ran {running}")


async def _steer(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    if not app.running:
        app.out.note("no turn is running: send it as a message instead")
        return
    await app.client.steer(app.session_id, arg)
    app.out.note(f"steering the running turn: {arg}")


async def _followup(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    status = await app.client.follow_up(app.session_id, arg)
    app.out.note(f"queued ({status})")


async def _cancel(app: ChatApp, tasks: TaskGroup, arg: str) -> None:
    cancelled = await app.client.cancel(app.session_id)
    app.out.note("cancelled" if cancelled else "no turn is running")


COMMANDS: dict[str, Command] = {
    "help": _help,
    "quit": _quit,
    "exit": _quit,
    "sessions": _sessions,
    "open": _open,
    "new": _new,
    "fork": _fork,
    "title": _title,
    "star": _star,
    "agent": _agent,
    "model": _model,
    "steer": _steer,
    "followup": _followup,
    "cancel": _cancel,
}
