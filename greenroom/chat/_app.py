"""The ``greenroom chat`` loop: pick a session, type, watch the answer stream, answer the agent.

It is a line REPL (prompt_toolkit for input, rich for output) over the client core. While a turn
runs there is no input prompt, so tokens print as they arrive; Ctrl-C cancels the turn. Tool
approvals and the agent's questions are asked inline. Events come from the session's event
log, which the client resumes after a dropped connection (the status line says so).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Any

import anyio
from anyio.abc import TaskGroup
from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import FormattedText

from greenroom.client import ApiError, ClientError, Event, EventStream, GreenroomClient

from ._commands import COMMANDS, Quit
from ._handlers import HANDLERS, context_use
from ._output import Output, plain_terminal


class ChatApp:
    """One terminal session with one server."""

    def __init__(
        self,
        client: GreenroomClient,
        *,
        output: Output | None = None,
        agent: str = "default",
        session_id: str = "",
    ) -> None:
        self.client = client
        self.out = output or Output()
        self.agent = agent  # "source" or "source/agent_name"
        self.model = ""  # a model for the next turn ("" = leave as is)
        self.session_id = session_id
        self.title = ""
        self.usage = (0, 0, 0.0)
        self.context = (0, 0)  # the last call's context length and the model's window (0: unknown)
        self.connection = "connecting"
        self.running = False
        self.listed: list[dict[str, Any]] = []
        self._stream: EventStream | None = None
        self._watch: anyio.CancelScope | None = None
        self._signals_send, self._signals = anyio.create_memory_object_stream[Event](16)
        self._prompt: PromptSession[str] | None = None
        if sys.stdin.isatty() and not plain_terminal():
            self._prompt = PromptSession(bottom_toolbar=self._toolbar)

    # --- input --------------------------------------------------------------------------------

    def _toolbar(self) -> FormattedText:
        tokens_in, tokens_out, cost = self.usage
        usage = f"{tokens_in} in / {tokens_out} out" + (f" / ${cost:.4f}" if cost else "")
        usage += context_use(*self.context)
        title = self.title or ("untitled" if self.session_id else "no session")
        return FormattedText([("", f" {title} | tokens {usage} | {self.connection} ")])

    async def ask(self, prompt: str) -> str:
        """One line of input; EOFError on Ctrl-D, KeyboardInterrupt on Ctrl-C."""
        if self._prompt is not None:
            return str(await self._prompt.prompt_async(prompt))
        self.out.end_stream()
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            raise EOFError
        return str(line).rstrip("\n")

    # --- main loop ----------------------------------------------------------------------------

    async def run(self) -> int:
        try:
            await self.client.health()
        except ClientError as exc:
            self.out.error(f"cannot reach greenroom at {self.client.base_url}: {exc}")
            return 1
        self.out.note(f"greenroom chat on {self.client.base_url}; /help lists the commands")
        async with anyio.create_task_group() as tasks:
            try:
                if self.session_id:
                    await self.open(tasks, self.session_id)
                else:
                    await self.pick_session(tasks)
                await self.loop(tasks)
            except (Quit, EOFError):
                pass
            finally:
                tasks.cancel_scope.cancel()
        return 0

    async def loop(self, tasks: TaskGroup) -> None:
        while True:
            try:
                line = (await self.ask("you> ")).strip()
            except KeyboardInterrupt:
                continue
            if not line:
                continue
            try:
                if line.startswith("/"):
                    await self.command(tasks, line)
                else:
                    await self.send(tasks, line)
            except ApiError as exc:
                self.out.error(exc.message)
            except ClientError as exc:
                self.out.error(str(exc))

    async def pick_session(self, tasks: TaskGroup) -> None:
        self.listed = (await self.client.sessions())[:10]
        if not self.listed:
            await self.new_session(tasks)
            return
        self.print_sessions()
        answer = (await self.ask("session number, or Enter for a new one: ")).strip()
        if answer.isdigit() and 1 <= int(answer) <= len(self.listed):
            await self.open(tasks, self.listed[int(answer) - 1]["id"])
        else:
            await self.new_session(tasks)

    def print_sessions(self) -> None:
        for n, s in enumerate(self.listed, 1):
            star = "* " if s.get("starred") else ""
            title = s.get("title") or "untitled"
            self.out.line(f"{n:>2}. {star}{title}  ({s.get('num_messages', 0)} messages)")

    async def new_session(self, tasks: TaskGroup) -> None:
        session = await self.client.create_session()
        await self.open(tasks, session["id"])

    async def open(self, tasks: TaskGroup, session_id: str) -> None:
        """Show the session's history, then follow its event log from the snapshot on."""
        snapshot = await self.client.snapshot(session_id)
        if self._watch is not None:
            self._watch.cancel()
        self.session_id = session_id
        self.title = snapshot.get("title", "")
        self.usage = (
            snapshot.get("input_tokens", 0),
            snapshot.get("output_tokens", 0),
            snapshot.get("cost") or 0.0,
        )
        self.running = bool(snapshot.get("streaming"))
        self.out.line(f"session: {self.title or 'untitled'} ({session_id})", "bold")
        for item in snapshot.get("messages") or []:
            self.show_stored(item)
        await tasks.start(self.watch, session_id, snapshot.get("last_event_seq", 0))

    def show_stored(self, item: dict[str, Any]) -> None:
        message = item.get("message") or {}
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            self.out.line(f"you: {content}")
        elif role == "assistant":
            if content:
                self.out.line(f"agent: {content}")
            for call in message.get("tool_calls") or []:
                self.out.tool_call(call)
        elif role == "tool":
            self.out.tool_result(content)

    # --- events -------------------------------------------------------------------------------

    async def watch(
        self, session_id: str, since: int, *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.CancelScope() as scope:
            self._watch = scope
            async with self.client.events(session_id, since, on_state=self.on_state) as stream:
                self._stream = stream
                task_status.started()
                try:
                    async for event in stream:
                        self.on_event(event)
                except ApiError as exc:
                    self.out.error(f"the event log stopped: {exc.message}")

    def on_state(self, state: str) -> None:
        shown = {"reconnecting": "reconnecting…"}.get(state, state)
        if state in ("reconnecting", "live") and self.connection != "connecting":
            self.out.note(f"[connection: {shown}]")
        self.connection = shown

    def on_event(self, event: Event) -> None:
        handler = HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)

    def signal(self, event: Event) -> None:
        """Tell a waiting turn about an event it must act on (a question, the end)."""
        # Full only when nobody followed a turn for a while (other clients' turns): drop;
        # the queue is drained before each turn this app starts.
        with contextlib.suppress(anyio.WouldBlock):
            self._signals_send.send_nowait(event)

    # --- turns --------------------------------------------------------------------------------

    async def send(self, tasks: TaskGroup, text: str) -> None:
        if not self.session_id:
            await self.new_session(tasks)
        source, _, agent_name = self.agent.partition("/")
        self._drain_signals()
        await self.client.run(
            self.session_id, text, agent=source, agent_name=agent_name, model=self.model
        )
        self.model = ""
        await self.follow_turn()

    def _drain_signals(self) -> None:
        while True:
            try:
                self._signals.receive_nowait()
            except anyio.WouldBlock:
                return

    async def follow_turn(self) -> None:
        """Wait for the turn's end, answering its questions; Ctrl-C cancels it."""
        async with anyio.create_task_group() as watch:
            watch.start_soon(self._cancel_on_interrupt)
            while True:
                event = await self._signals.receive()
                if event.type in ("stream_stopped", "session_exited"):
                    break
                if event.type == "tool_call_confirmation":
                    await self.answer_confirmation(event)
                elif event.type == "elicitation_request":
                    await self.answer_elicitation(event)
                elif event.type == "max_iterations_reached":
                    await self.answer_continuation(event)
            watch.cancel_scope.cancel()

    async def _cancel_on_interrupt(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                self.out.note("cancelling the turn…")
                await self._cancel()

    async def _cancel(self) -> None:
        try:
            await self.client.cancel(self.session_id)
        except ClientError as exc:
            self.out.error(str(exc))

    async def answer_confirmation(self, event: Event) -> None:
        call = event.get("tool_call") or {}
        name = (call.get("function") or {}).get("name", "?")
        self.out.line(
            f"approve {name}? [y]es / [n]o / [t]en minutes of {name} / [a]lways allow {name}",
            "bold yellow",
        )
        while True:
            try:
                answer = (await self.ask("approve> ")).strip().lower()
            except KeyboardInterrupt:
                answer = "cancel"
            if answer in ("y", "yes"):
                await self.client.approve(self.session_id)
            elif answer in ("t", "ten"):
                await self.client.resume(
                    self.session_id, "approve-tool", tool_name=name, expires_in=600
                )
            elif answer in ("a", "always"):
                await self.client.resume(self.session_id, "approve-tool", tool_name=name)
            elif answer in ("n", "no"):
                reason = await self.ask("reason (optional)> ")
                await self.client.reject(self.session_id, reason.strip())
            elif answer == "cancel":
                await self.client.reject(self.session_id, "cancelled")
                await self._cancel()
            else:
                continue
            return

    async def answer_continuation(self, event: Event) -> None:
        """The turn made its ``max_iterations`` model calls: 10 more, or stop."""
        limit = event.get("max_iterations", "?")
        self.out.line(f"the agent reached its limit of {limit} iterations", "bold yellow")
        try:
            answer = (await self.ask("continue for 10 more? [y]es / [n]o> ")).strip().lower()
        except KeyboardInterrupt:
            answer = "n"
        if answer in ("y", "yes"):
            await self.client.approve(self.session_id)
        else:
            await self.client.reject(self.session_id, "stopped at max_iterations")

    async def answer_elicitation(self, event: Event) -> None:
        self.out.line(f"the agent asks: {event.get('message', '')}", "bold yellow")
        schema = event.get("schema") or {}
        content: dict[str, Any] = {}
        required = set(schema.get("required") or [])
        try:
            for name, prop in (schema.get("properties") or {}).items():
                value = await self.ask_field(name, prop, name in required)
                if value is not None:
                    content[name] = value
            action = "accept"
            if not schema.get("properties"):
                answer = (await self.ask("[a]ccept / [d]ecline> ")).strip().lower()
                action = "accept" if answer.startswith("a") else "decline"
        except KeyboardInterrupt:
            action, content = "cancel", {}
        await self.client.answer_elicitation(
            self.session_id, action, content, elicitation_id=event.get("elicitation_id", "")
        )

    async def ask_field(self, name: str, prop: dict[str, Any], required: bool) -> Any:
        label = prop.get("title") or name
        kind = prop.get("type", "string")
        hint = f" ({'/'.join(map(str, prop['enum']))})" if prop.get("enum") else ""
        hint += " [y/n]" if kind == "boolean" else ""
        while True:
            text = (await self.ask(f"{label}{hint}{'' if required else ' (optional)'}> ")).strip()
            if not text and not required:
                return None
            try:
                if kind == "boolean":
                    return text.lower() in ("y", "yes", "true", "1")
                if kind == "integer":
                    return int(text)
                if kind == "number":
                    return float(text)
            except ValueError:
                self.out.error(f"{label}: {'a whole number' if kind == 'integer' else 'a number'}")
                continue
            if prop.get("enum") and text not in map(str, prop["enum"]):
                self.out.error(f"pick one of {', '.join(map(str, prop['enum']))}")
                continue
            if text or not required:
                return text

    # --- commands -----------------------------------------------------------------------------

    async def command(self, tasks: TaskGroup, line: str) -> None:
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        handler = COMMANDS.get(name)
        if handler is None:
            self.out.error(f"unknown command /{name} (/help lists them)")
            return
        await handler(self, tasks, arg)
