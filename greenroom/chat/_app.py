"""The ``greenroom chat`` loop: pick a session, type, watch the answer stream, answer the agent.

A line REPL (prompt_toolkit for input, rich for output) over the client core. The input line
stays open while a turn streams (prompt_toolkit's application runs beside the stream, whose
lines print above it): a line typed then *steers* the running turn, ``/followup TEXT`` queues
one for after it and ``/cancel`` (or Ctrl-C) cancels it. Tool approvals and the agent's
questions take over the same input line (its prompt says so) until answered. Events come from
the session's event log, which the client resumes after a dropped connection (the status line
says so).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

import anyio
from anyio.abc import TaskGroup
from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import FormattedText

from greenroom.client import ApiError, ClientError, Event, EventStream, GreenroomClient

from ._commands import COMMANDS, Quit
from ._handlers import HANDLERS, context_use
from ._output import Output, plain_terminal
from ._questions import (
    answer_confirmation,
    answer_continuation,
    answer_elicitation,
    decide_in_doubt,
)


class _Question:
    """A question a waiting turn asks; the input loop gives it the next line typed."""

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self.line = ""
        self.interrupted = False
        self.done = anyio.Event()

    def give(self, line: str, *, interrupted: bool = False) -> None:
        self.line, self.interrupted = line, interrupted
        self.done.set()


class ChatApp:
    """One terminal session with one server."""

    def __init__(
        self,
        client: GreenroomClient,
        *,
        output: Output | None = None,
        agent: str = "",
        session_id: str = "",
    ) -> None:
        self.client = client
        self.out = output or Output()
        # "source" or "source/agent_name" for new sessions ("": default, else the first listed)
        self.agent = agent
        self.session_agent = ""  # the open session's agent, once it ran (decision 0019)
        self.model = ""  # a model for the next turn ("" = leave as is)
        self.session_id = session_id
        self.title = ""
        self.usage = (0, 0, 0.0)
        self.context = (0, 0)  # (tokens used, the model's limit); 0: unknown
        self.running_model = ""  # the model the last turn ran (agent_info)
        self.welcome: dict[str, str] = {}  # agent source -> welcome_message, when listed
        self.connection = "connecting"
        self.running = False
        self.listed: list[dict[str, Any]] = []
        self.question: _Question | None = None
        self._stream: EventStream | None = None
        self._watch: anyio.CancelScope | None = None
        self._signals_send, self._signals = anyio.create_memory_object_stream[Event](16)
        self._prompt: PromptSession[str] | None = None
        if sys.stdin.isatty() and not plain_terminal():
            self._prompt = PromptSession(bottom_toolbar=self._toolbar)

    @property
    def run_agent(self) -> str:
        """What a turn names: the session's own agent once it ran, else the chosen one."""
        return self.session_agent or self.agent or "default"

    # --- input --------------------------------------------------------------------------------

    def _toolbar(self) -> FormattedText:
        tokens_in, tokens_out, cost = self.usage
        usage = f"{tokens_in} in / {tokens_out} out" + (f" / ${cost:.4f}" if cost else "")
        usage += context_use(*self.context)
        title = self.title or ("untitled" if self.session_id else "no session")
        return FormattedText([("", f" {title} | tokens {usage} | {self.connection} ")])

    def prompt_text(self) -> str:
        if self.question is not None:
            prompt = self.question.prompt
        else:
            prompt = "steer> " if self.running else "you> "
        # The streamed line in progress sits above the input line until it is whole.
        partial = self.out.partial
        return f"{partial}\n{prompt}" if partial else prompt

    def refresh_prompt(self) -> None:
        """The prompt changed (a question, a turn started or ended): redraw it."""
        if self._prompt is not None and self._prompt.app.is_running:
            self._prompt.app.invalidate()

    async def ask(self, prompt: str | None = None) -> str:
        """One line of input; EOFError on Ctrl-D, KeyboardInterrupt on Ctrl-C. Without
        ``prompt`` the prompt follows the state (``you>``, ``steer>``, a question's)."""
        if self._prompt is not None:
            message = prompt if prompt is not None else self.prompt_text
            return str(await self._prompt.prompt_async(message))
        self.out.end_stream()
        sys.stdout.write(prompt if prompt is not None else self.prompt_text())
        sys.stdout.flush()
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            raise EOFError
        return str(line).rstrip("\n")

    async def answer(self, prompt: str) -> str:
        """The next line typed, for a question a waiting turn asks (the input loop reads it)."""
        question = _Question(prompt)
        # The question takes the input line at once: a line typed from now on answers it, even
        # while its prompt is not drawn yet.
        self.question = question
        if self._prompt is not None:
            sys.stdout.flush()
            await anyio.sleep(0.05)  # the proxy's thread prints what came before the question
        if self._prompt is None:
            self.out.line(prompt)  # a plain terminal's prompt was printed before the question
        self.refresh_prompt()
        try:
            await question.done.wait()
        finally:
            if self.question is question:
                self.question = None
            self.refresh_prompt()
        if question.interrupted:
            raise KeyboardInterrupt
        return question.line

    async def cancel_turn(self) -> None:
        await self._cancel()

    @contextlib.contextmanager
    def _beside_the_prompt(self) -> Iterator[None]:
        """Print above the open input line (prompt_toolkit redraws it below what printed)."""
        if self._prompt is None:
            yield
            return
        from prompt_toolkit.patch_stdout import StdoutProxy

        self.out.hold_lines = True
        self.out.on_partial = self.refresh_prompt
        try:
            # patch_stdout, without its 0.2 s pause between writes: a question's lines are
            # on the screen before its prompt is.
            with (
                StdoutProxy(raw=True, sleep_between_writes=0.0) as proxy,
                contextlib.redirect_stdout(proxy),
            ):
                yield
        finally:
            self.out.end_stream()
            self.out.hold_lines = False

    # --- main loop ----------------------------------------------------------------------------

    async def run(self) -> int:
        try:
            await self.client.health()
        except ClientError as exc:
            self.out.error(f"cannot reach greenroom at {self.client.base_url}: {exc}")
            return 1
        self.out.note(f"greenroom chat on {self.client.base_url}; /help lists the commands")
        with self._beside_the_prompt():
            async with anyio.create_task_group() as tasks:
                try:
                    await self.choose_agent()
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

    async def choose_agent(self) -> None:
        """A server without the agent asked for (or without ``default``): say so, take the
        first it lists, so the first message does not fail."""
        try:
            sources = await self.client.agents()
        except ClientError as exc:
            self.out.error(f"cannot list the agents: {exc}")
            return
        names = [s["name"] for s in sources]
        self.welcome = {s["name"]: s.get("welcome_message") or "" for s in sources}
        wanted = (self.agent or "default").partition("/")[0]
        if wanted in names or not names:
            return
        if self.agent:
            self.out.error(f"this server has no agent {wanted!r}")
        self.agent = names[0]
        self.out.note(f"agent: {names[0]} (this server has no {wanted!r}; /agent lists them)")

    async def loop(self, tasks: TaskGroup) -> None:
        while True:
            try:
                raw = await self.ask()
            except KeyboardInterrupt:
                if self.question is not None:
                    self.question.give("", interrupted=True)
                elif self.running:
                    self.out.note("cancelling the turn…")
                    await self._cancel()
                continue
            if self.question is not None:  # the line answers what the turn asks
                self.question.give(raw)
                continue
            line = raw.strip()
            if not line:
                continue
            try:
                if line.startswith("/"):
                    await self.command(tasks, line)
                elif self.running:
                    await self.client.steer(self.session_id, line)
                    self.out.note(f"steering the running turn: {line}")
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
        while True:
            answer = (await self.ask("session number, or Enter for a new one: ")).strip()
            if answer.isdigit() and 1 <= int(answer) <= len(self.listed):
                await self.open(tasks, self.listed[int(answer) - 1]["id"])
            elif answer.startswith("/"):
                if answer.split()[0] in ("/help", "/quit", "/exit", "/agent", "/sessions"):
                    await self.command(tasks, answer)  # nothing opened or created
                else:
                    self.out.error("open or start a session first")
                continue
            elif answer:
                self.out.error(f"no session {answer!r}: a number from the list, or Enter")
                continue
            else:
                await self.new_session(tasks)
            return

    def print_sessions(self) -> None:
        for n, s in enumerate(self.listed, 1):
            star = "* " if s.get("starred") else ""
            title = s.get("title") or "untitled"
            count = s.get("num_messages", 0)
            noun = "message" if count == 1 else "messages"
            agent = f", {s['agent_file']}" if s.get("agent_file") else ""
            self.out.line(f"{n:>2}. {star}{title}  ({count} {noun}{agent})")

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
        file, name = snapshot.get("agent_file", ""), snapshot.get("agent_name", "")
        self.session_agent = f"{file}/{name}" if file and name else file
        self.out.line(f"session: {self.title or 'untitled'} ({session_id})", "bold")
        if self.session_agent:
            self.out.note(f"agent: {self.session_agent}")
        messages = snapshot.get("messages") or []
        for item in messages:
            self.show_stored(item)
        welcome = self.welcome.get(self.run_agent.partition("/")[0], "")
        if not messages and welcome:
            self.out.line(welcome, "italic")
        await tasks.start(self.watch, session_id, snapshot.get("last_event_seq", 0))
        if self.running:
            tasks.start_soon(self.follow_turn)
        tasks.start_soon(self.offer_decisions, session_id)  # answered at the input line

    async def offer_decisions(self, session_id: str) -> None:
        """A crash left tool calls in doubt: ask about each (the session runs again after)."""
        try:
            calls = await self.client.in_doubt(session_id)
        except ClientError:
            return
        for call in calls:
            try:
                action = await decide_in_doubt(self, call)
                await self.client.decide(session_id, call["tool_call_id"], action)
            except KeyboardInterrupt:
                self.out.note("undecided: the session runs again once each call is decided")
                return
            except ClientError as exc:
                self.out.error(str(exc))
                return
            self.out.note(f"{call.get('name', '?')}: {action}")

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
        agent = self.run_agent
        source, _, agent_name = agent.partition("/")
        self._drain_signals()
        try:
            await self.client.run(
                self.session_id, text, agent=source, agent_name=agent_name, model=self.model
            )
        except ApiError as exc:
            if exc.code == "needs_decision":
                self.out.error(exc.message)
                tasks.start_soon(self.offer_decisions, self.session_id)
                return
            raise
        self.model = ""
        self.session_agent = agent
        self.running = True
        self.refresh_prompt()
        tasks.start_soon(self.follow_turn)

    def _drain_signals(self) -> None:
        while True:
            try:
                self._signals.receive_nowait()
            except anyio.WouldBlock:
                return

    async def follow_turn(self) -> None:
        """Beside the input loop: answer the turn's questions until it ends (Ctrl-C, or
        ``/cancel``, cancels it)."""
        async with anyio.create_task_group() as watch:
            if self._prompt is None:  # a plain terminal: Ctrl-C is a signal, not a key
                watch.start_soon(self._cancel_on_interrupt)
            while True:
                event = await self._signals.receive()
                if event.type in ("stream_stopped", "session_exited"):
                    break
                try:
                    if event.type == "tool_call_confirmation":
                        await answer_confirmation(self, event)
                    elif event.type == "elicitation_request":
                        await answer_elicitation(self, event)
                    elif event.type == "max_iterations_reached":
                        await answer_continuation(self, event)
                except ClientError as exc:
                    self.out.error(str(exc))
            watch.cancel_scope.cancel()
        self.refresh_prompt()

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

    # --- commands -----------------------------------------------------------------------------

    async def command(self, tasks: TaskGroup, line: str) -> None:
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        handler = COMMANDS.get(name)
        if handler is None:
            self.out.error(f"unknown command /{name} (/help lists them)")
            return
        await handler(self, tasks, arg)
