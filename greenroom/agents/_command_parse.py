"""A shell command line as the simple commands it runs (for permission rules, issue 23).

The text is parsed with tree-sitter-bash (docs/decisions/0020-shell-command-rules.md). Every
``command`` node anywhere in the tree is a simple command: through ``;``, ``&&``, ``||``,
pipes, newlines, subshells, groups, functions, loops, ``$(...)``, backticks and process
substitutions. Each is normalised: quotes and backslashes are removed from literal words and
the program is reduced to its basename, so ``\\rm``, ``'rm'`` and ``/bin/rm`` are all ``rm``.

Programs that only run another program are looked through: ``command``, ``exec``,
``builtin``, ``env``, ``nice``, ``nohup``, ``time``, ``timeout``, ``stdbuf``, ``setsid``,
``ionice``, ``busybox``, and the shells' ``-c`` and ``eval`` (whose text is parsed in turn).
``sudo``/``doas``, ``xargs`` and ``find -exec`` list both themselves and what they run.
``find ... -delete`` and ``unlink`` also count as ``rm``.

A simple command is *opaque* when its program is not a literal word (an expansion, a command
substitution, a glob or brace pattern), when a shell reads its commands from standard input,
or when nesting goes deeper than :data:`MAX_DEPTH`. A command line tree-sitter reports errors
in is not *understood*. Callers treat both as "cannot tell".
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

import attrs

MAX_DEPTH = 8

_WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<>", ">&", "&>|"})
_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "-"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox-sh", "fish"})
# Transparent wrappers: options that take a separate value, and positionals before the program.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "command": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "builtin": (frozenset(), 0),
    "env": (frozenset({"-u", "-C", "--unset", "--chdir", "-P"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "-o", "--format", "--output"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "setsid": (frozenset(), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "busybox": (frozenset(), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
}
# Wrappers that change what a program may do: listed themselves and looked through.
_PRIVILEGED: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R"}),
    "doas": frozenset({"-u", "-C"}),
    "xargs": frozenset({"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "--delimiter"}),
}


@attrs.frozen
class SimpleCommand:
    """One program run: its basename and literal arguments (expansions kept as written)."""

    program: str
    args: tuple[str, ...] = ()
    opaque: bool = False  # the program cannot be known from the text
    writes: bool = False  # output redirected to a file

    @property
    def text(self) -> str:
        return " ".join((self.program, *self.args))


@attrs.frozen
class ParsedCommand:
    commands: tuple[SimpleCommand, ...]
    understood: bool

    @property
    def certain(self) -> bool:
        """Understood, and every program is known."""
        return self.understood and not any(c.opaque for c in self.commands)


@attrs.frozen
class _Word:
    text: str
    dynamic: bool = False  # contains an expansion or substitution
    pattern: bool = False  # unquoted glob or brace characters


@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def _unescape_unquoted(raw: str) -> tuple[str, bool]:
    out: list[str] = []
    pattern = False
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
            continue
        if ch in "*?[{":
            pattern = True
        out.append(ch)
        i += 1
    return "".join(out), pattern


def _unescape_double(raw: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw) and raw[i + 1] in '"\\$`\n':
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _word(node: Any) -> _Word:
    raw = node.text.decode(errors="replace")
    kind = node.type
    if kind in ("word", "number"):
        text, pattern = _unescape_unquoted(raw)
        return _Word(text, pattern=pattern)
    if kind == "raw_string":
        return _Word(raw[1:-1])
    if kind == "ansi_c_string":
        try:
            return _Word(codecs.decode(raw[2:-1], "unicode_escape"))
        except UnicodeDecodeError:
            return _Word(raw, dynamic=True)
    if kind in ("string", "translated_string"):
        parts = list(node.named_children)
        if any(c.type != "string_content" for c in parts):
            return _Word(raw, dynamic=True)
        return _Word(_unescape_double("".join(c.text.decode(errors="replace") for c in parts)))
    if kind == "concatenation":
        words = [_word(c) for c in node.named_children]
        return _Word(
            "".join(w.text for w in words),
            any(w.dynamic for w in words),
            any(w.pattern for w in words),
        )
    return _Word(raw, dynamic=True)


def _basename(program: str) -> str:
    return program.rstrip("/").rsplit("/", 1)[-1] or program


def _skip_options(
    args: Sequence[_Word], with_value: frozenset[str], positionals: int, env: bool
) -> Sequence[_Word] | None:
    """The words from the wrapped program on, or None if there is none."""
    i = 0
    while i < len(args):
        text = args[i].text
        if text == "--":
            i += 1
            break
        if env and "=" in text and not text.startswith("-"):
            i += 1
            continue
        if text.startswith("-") and len(text) > 1 and not args[i].dynamic:
            i += 2 if text in with_value else 1
            continue
        break
    i += positionals
    return args[i:] if i < len(args) else None


def _plain(words: Sequence[_Word], writes: bool) -> SimpleCommand:
    return SimpleCommand(_basename(words[0].text), tuple(w.text for w in words[1:]), False, writes)


def _opaque(words: Sequence[_Word], writes: bool) -> SimpleCommand:
    return SimpleCommand(words[0].text, tuple(w.text for w in words[1:]), True, writes)


def _script(text: str, depth: int, writes: bool) -> Iterator[SimpleCommand]:
    parsed = _parse(text, depth + 1)
    if not parsed.understood:
        yield SimpleCommand(text, (), True, writes)
    yield from parsed.commands


def _shell_c(words: Sequence[_Word], depth: int, writes: bool) -> Iterator[SimpleCommand]:
    args = words[1:]
    for i, word in enumerate(args):
        text = word.text
        if text.startswith("-") and not text.startswith("--") and "c" in text[1:]:
            if i + 1 >= len(args) or args[i + 1].dynamic:
                yield _opaque(words, writes)
                return
            yield from _script(args[i + 1].text, depth, writes)
            return
        if not text.startswith(("-", "+")):
            yield _plain(words, writes)  # runs a script file
            return
    yield _opaque(words, writes)  # reads its commands from standard input


def _find(words: Sequence[_Word], depth: int, writes: bool) -> Iterator[SimpleCommand]:
    yield _plain(words, writes)
    args = list(words[1:])
    paths = []
    for word in args:
        if word.text.startswith(("-", "(", "!")):
            break
        paths.append(word)
    i = 0
    while i < len(args):
        text = args[i].text
        if text in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(args) and args[end].text not in (";", "+"):
                end += 1
            if i + 1 < end:
                yield from _expand(args[i + 1 : end], depth, writes)
            i = end
        elif text == "-delete":
            yield SimpleCommand("rm", tuple(p.text for p in paths), False, writes)
        i += 1


def _expand(words: Sequence[_Word], depth: int, writes: bool) -> Iterator[SimpleCommand]:
    """The simple commands ``words`` runs (itself, or what it wraps)."""
    head = words[0]
    if head.dynamic or head.pattern or depth > MAX_DEPTH or not head.text:
        yield _opaque(words, writes)
        return
    name = _basename(head.text).lower()
    args = words[1:]
    if name in _WRAPPERS:
        if name == "env" and any(a.text.startswith(("-S", "--split-string")) for a in args):
            yield _opaque(words, writes)
            return
        if name == "command" and any(a.text in ("-v", "-V") for a in args[:2]):
            yield _plain(words, writes)
            return
        with_value, positionals = _WRAPPERS[name]
        rest = _skip_options(args, with_value, positionals, env=name == "env")
        if rest is None:
            yield _plain(words, writes)
        else:
            yield from _expand(rest, depth + 1, writes)
    elif name in _SHELLS:
        yield from _shell_c(words, depth, writes)
    elif name == "eval":
        if any(a.dynamic for a in args):
            yield _opaque(words, writes)
        else:
            yield from _script(" ".join(a.text for a in args), depth, writes)
    elif name in _PRIVILEGED:
        yield _plain(words, writes)
        rest = _skip_options(args, _PRIVILEGED[name], 0, env=name != "xargs")
        if rest is not None:
            yield from _expand(rest, depth + 1, writes)
        elif name == "xargs":
            yield SimpleCommand("echo", (), False, writes)
    elif name == "find":
        yield from _find(words, depth, writes)
    elif name == "unlink":
        yield _plain(words, writes)
        yield SimpleCommand("rm", tuple(w.text for w in args), False, writes)
    else:
        yield _plain(words, writes)


def _redirect_writes(node: Any) -> bool:
    for child in node.children:
        if child.type != "file_redirect":
            continue
        ops = {c.type for c in child.children if not c.is_named}
        if not ops & _WRITE_OPS:
            continue
        dest = child.child_by_field_name("destination")
        if dest is None:
            return True
        target = _word(dest)
        if target.dynamic or (target.text not in _HARMLESS_TARGETS and not target.text.isdigit()):
            return True
    return False


def _walk(node: Any, depth: int, writes: bool) -> Iterator[SimpleCommand]:
    if node.type == "redirected_statement":
        writes = writes or _redirect_writes(node)
    if node.type == "command":
        here = writes or _redirect_writes(node)
        words: list[_Word] = []
        for index, child in enumerate(node.children):
            field = node.field_name_for_child(index)
            if field == "name":
                inner = child.named_children
                words.append(_word(inner[0] if inner else child))
            elif field == "argument":
                words.append(_word(child))
        if words:
            yield from _expand(words, depth, here)
    for child in node.children:
        yield from _walk(child, depth, writes)


def _parse(text: str, depth: int) -> ParsedCommand:
    if depth > MAX_DEPTH:
        return ParsedCommand((SimpleCommand(text, (), True),), False)
    tree = _parser().parse(text.encode())
    root = tree.root_node
    if root.has_error:
        return ParsedCommand((), False)
    commands = tuple(_walk(root, depth, False))
    return ParsedCommand(commands, True)


@lru_cache(maxsize=512)
def parse_command(text: str) -> ParsedCommand:
    """The simple commands ``text`` runs, normalised (see the module docstring)."""
    return _parse(text, 0)
