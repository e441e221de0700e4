"""The ``scripted`` model: replays a script file, one turn per model call, deterministically.

For demos, tests and benchmarks. A model ``scripted/<path>`` (``ModelConfig.model`` is the
path) reads the script at ``<path>``; a relative path is resolved against the base directory
given to :func:`~greenroom.agents.providers.make_provider` (the agent file's directory), or the
working directory when there is none. The file is read once, when the provider is built, and
a bad script fails then with :class:`~greenroom.errors.InvalidRequest` naming the bad entry.

Format (YAML; JSON works too, being YAML)::

    loop: false              # optional; what to do when the turns run out (see below)
    turns:
      - "Hello there!"       # a turn given as a string: one text step
      - - reasoning: "The user wants a listing."
        - text: ["Let me ", "look."]
        - tool_call: {name: shell, arguments: {cmd: ls}}      # optional id: ...
        - usage: {input_tokens: 120, output_tokens: 9}
      - - delay: 1.5         # seconds (trio.sleep, so a mock clock can skip it)
        - error: rate_limited                                  # or {code: ..., message: ...}

A top-level list is taken as ``turns``. Each turn is a list of steps, run in order; each step
is a one-key mapping:

``text`` / ``reasoning``
    tokens streamed as TextDelta / ReasoningDelta: a list gives the exact tokens, a string is
    streamed word by word.
``tool_call``
    ``name``, ``arguments`` (a mapping, sent as JSON, or a JSON string) and an optional ``id``
    (default ``call_<turn>_<n>``, numbered from 1).
``delay``
    seconds to sleep.
``error``
    raise the ModelError subclass with that code: ``model_error``, ``missing_api_key``,
    ``rate_limited``, ``model_timeout`` or ``malformed_stream``. Steps after it do not run.
``usage``
    the turn's usage (fields of :class:`~greenroom.domain.Usage`); without it, input tokens
    are estimated from the request and output tokens are the number of tokens streamed.

Turns are consumed in order by each provider instance (the loop builds one per runtime), so
the n-th model call gets the n-th turn. When the turns run out, the call fails with a
ModelError saying so; with ``loop: true`` the script starts over instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

import attrs
import trio
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from greenroom.domain import FunctionCall, ToolCall, Usage
from greenroom.errors import (
    InvalidRequest,
    ModelError,
    ModelKeyMissing,
    ModelRateLimited,
    ModelStreamMalformed,
    ModelTimeout,
)

from ._base import ModelRequest, ModelResponse, OnDelta, ReasoningDelta, TextDelta
from ._echo import estimate_tokens

ERRORS: Mapping[str, type[ModelError]] = {
    cls.code: cls
    for cls in (ModelError, ModelKeyMissing, ModelRateLimited, ModelTimeout, ModelStreamMalformed)
}


@attrs.frozen
class Text:
    tokens: tuple[str, ...]


@attrs.frozen
class Reasoning:
    tokens: tuple[str, ...]


@attrs.frozen
class CallTool:
    call: ToolCall


@attrs.frozen
class Delay:
    seconds: float


@attrs.frozen
class Fail:
    code: str
    message: str = ""


@attrs.frozen
class SetUsage:
    usage: Usage


Step: TypeAlias = Text | Reasoning | CallTool | Delay | Fail | SetUsage


@attrs.frozen
class Script:
    turns: tuple[tuple[Step, ...], ...]
    loop: bool = False
    source: str = "<script>"


class ScriptedProvider:
    """Replays ``script``, one turn per :meth:`complete` call (see the module docstring).

    Attributes:
        position: how many calls have claimed a turn (it keeps counting past a loop's end).
    """

    def __init__(self, script: Script) -> None:
        self.script = script
        self.position = 0

    @classmethod
    def from_file(cls, path: Path) -> ScriptedProvider:
        """Load the script at ``path``.

        Raises:
            InvalidRequest: the file cannot be read or is not a valid script.
        """
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"scripted model: cannot read script {path}: {exc}") from exc
        return cls(parse_script(text, source=str(path)))

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        turns = self.script.turns
        index = self.position
        if index >= len(turns) and not self.script.loop:
            raise ModelError(
                f"scripted model {self.script.source}: all {len(turns)} turns were played"
            )
        self.position += 1  # claimed before any await: concurrent calls get distinct turns
        turn_number = index % len(turns) + 1
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        usage: Usage | None = None
        for step in turns[turn_number - 1]:
            match step:
                case Text(tokens):
                    for token in tokens:
                        text.append(token)
                        await on_delta(TextDelta(token))
                case Reasoning(tokens):
                    for token in tokens:
                        reasoning.append(token)
                        await on_delta(ReasoningDelta(token))
                case CallTool(call):
                    calls.append(call)
                case Delay(seconds):
                    await trio.sleep(seconds)
                case Fail(code, message):
                    raise ERRORS[code](message or None)
                case SetUsage(given):
                    usage = given
        if usage is None:
            usage = Usage(
                input_tokens=estimate_tokens(request.messages),
                output_tokens=len(text) + len(reasoning),
            )
        return ModelResponse(
            content="".join(text),
            reasoning="".join(reasoning),
            tool_calls=tuple(calls),
            usage=usage,
            stop_reason="tool_calls" if calls else "stop",
            model=request.model.model,
        )


def parse_script(text: str, *, source: str = "<script>") -> Script:
    """Parse a script's YAML or JSON text.

    Raises:
        InvalidRequest: the text is not a valid script; ``path`` names the bad entry.
    """
    try:
        data = json.loads(text)  # JSON is YAML, but a tab-indented JSON file is not
    except json.JSONDecodeError:
        try:
            data = YAML(typ="safe", pure=True).load(text)
        except YAMLError as exc:
            raise InvalidRequest(f"scripted model: {source} is not valid YAML: {exc}") from exc
    return script_from_data(data, source=source)


def script_from_data(data: Any, *, source: str = "<script>") -> Script:
    """A script from already-parsed data (a mapping with ``turns``, or the list of turns)."""
    loop = False
    if isinstance(data, Mapping):
        unknown = set(data) - {"turns", "loop"}
        _check(not unknown, source, "$", f"unknown keys {sorted(map(str, unknown))}")
        loop = data.get("loop", False)
        _check(isinstance(loop, bool), source, "$.loop", "must be true or false")
        data = data.get("turns")
    _check(isinstance(data, list) and bool(data), source, "$.turns", "must be a non-empty list")
    turns = tuple(_turn(turn, n, source) for n, turn in enumerate(data))
    return Script(turns=turns, loop=loop, source=source)


def _turn(turn: Any, n: int, source: str) -> tuple[Step, ...]:
    path = f"$.turns[{n}]"
    if isinstance(turn, str):
        return (Text(_tokens(turn, source, path)),)
    _check(isinstance(turn, list), source, path, "must be a list of steps or a string")
    return tuple(_step(step, n, i, source) for i, step in enumerate(turn))


def _step(step: Any, turn: int, i: int, source: str) -> Step:
    path = f"$.turns[{turn}][{i}]"
    _check(isinstance(step, Mapping) and len(step) == 1, source, path, "must be a one-key mapping")
    ((kind, value),) = step.items()
    path = f"{path}.{kind}"
    match kind:
        case "text":
            return Text(_tokens(value, source, path))
        case "reasoning":
            return Reasoning(_tokens(value, source, path))
        case "tool_call":
            return CallTool(_tool_call(value, f"call_{turn + 1}_{i + 1}", source, path))
        case "delay":
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            _check(ok, source, path, "must be a number of seconds")
            return Delay(float(value))
        case "error":
            return _fail(value, source, path)
        case "usage":
            _check(isinstance(value, Mapping), source, path, "must be a mapping")
            fields = {f.name for f in attrs.fields(Usage)}
            ok = set(value) <= fields and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value.values()
            )
            _check(ok, source, path, f"takes integer fields among {sorted(fields)}")
            return SetUsage(Usage(**value))
    raise _invalid(source, path, "is not a step (text, reasoning, tool_call, delay, error, usage)")


def _tokens(value: Any, source: str, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        # Word by word, each word keeping the whitespace before it.
        return tuple(re.findall(r"\s*\S+", value)) or (value,)
    ok = isinstance(value, list) and all(isinstance(token, str) for token in value)
    _check(ok, source, path, "must be a string or a list of strings")
    return tuple(value)


def _tool_call(value: Any, default_id: str, source: str, path: str) -> ToolCall:
    ok = isinstance(value, Mapping) and isinstance(value.get("name"), str) and value["name"]
    _check(bool(ok), source, path, "needs a name")
    _check(set(value) <= {"name", "arguments", "id"}, source, path, "takes name, arguments, id")
    arguments = value.get("arguments", {})
    if isinstance(arguments, Mapping):
        arguments = json.dumps(dict(arguments))
    _check(isinstance(arguments, str), source, f"{path}.arguments", "must be a mapping or JSON")
    call_id = value.get("id", default_id)
    _check(isinstance(call_id, str) and bool(call_id), source, f"{path}.id", "must be a string")
    return ToolCall(id=call_id, function=FunctionCall(value["name"], arguments))


def _fail(value: Any, source: str, path: str) -> Fail:
    code, message = value, ""
    if isinstance(value, Mapping):
        code, message = value.get("code"), value.get("message", "")
        _check(isinstance(message, str), source, f"{path}.message", "must be a string")
    _check(code in ERRORS, source, path, f"needs a code among {sorted(ERRORS)}")
    return Fail(code, message)


def _check(ok: bool, source: str, path: str, problem: str) -> None:
    if not ok:
        raise _invalid(source, path, problem)


def _invalid(source: str, path: str, problem: str) -> InvalidRequest:
    return InvalidRequest(f"scripted model: {source}: {path} {problem}", path=path)
