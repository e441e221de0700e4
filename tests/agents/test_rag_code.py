"""Code-aware chunking (``chunking.code_aware``): Go and Python files cut at their functions
by the real tree-sitter grammars; other files by the text chunker."""

from __future__ import annotations

import re

from greenroom.agents._rag_config import RagChunking
from greenroom.agents.tools._rag_code import code_chunks, language_of
from greenroom.agents.tools._rag_index import chunk_text

GO = """\
// Package zoo keeps animals.
package zoo

import (
\t"fmt"
\t"strings"
)

// Animal is one resident.
type Animal struct {
\tName string
\tLegs int
}

// Greet says hello to an animal.
// It never fails.
func Greet(a Animal) string {
\tif a.Legs > 2 {
\t\treturn fmt.Sprintf("hello, %s of %d legs", a.Name, a.Legs)
\t}
\treturn "hello, " + a.Name
}

func (a *Animal) Shout() string {
\treturn strings.ToUpper(a.Name) + "!"
}

// Count counts the legs of a herd.
func Count(herd []Animal) int {
\ttotal := 0
\tfor _, a := range herd {
\t\ttotal += a.Legs
\t}
\treturn total
}
"""

FUNCTIONS = {
    "Greet": GO[GO.index("// Greet") : GO.index("func (a *Animal)") - 2],
    "Shout": GO[GO.index("func (a *Animal)") : GO.index("// Count") - 2],
    "Count": GO[GO.index("// Count") :].rstrip(),
}


def test_suffixes_pick_the_grammar() -> None:
    assert language_of("/src/zoo/zoo.go") == "go"
    assert language_of("/src/ZOO.GO") == "go"
    assert language_of("/src/tool.py") == language_of("/src/stubs.pyi") == "python"
    assert language_of("/src/zoo.rs") is language_of("/src/.go") is language_of("/src/go") is None


def test_a_go_file_is_cut_at_its_functions_and_no_function_that_fits_is_split() -> None:
    longest = max(len(body) for body in FUNCTIONS.values())
    for size in (longest, longest + 40, 250, 300, 400, 2000):
        chunks = code_chunks("zoo.go", GO, RagChunking(size=size, overlap=20))
        assert all(len(c.content) <= size for c in chunks), size
        for name, body in FUNCTIONS.items():
            holding = [
                c for c in chunks if f"func {name}" in c.content or f") {name}(" in c.content
            ]
            assert len(holding) == 1 and body in holding[0].content, (size, name)
        # chunks are slices of the file, in order, and nothing is lost
        joined = "".join(c.content for c in chunks)
        assert re.sub(r"\s", "", joined) == re.sub(r"\s", "", GO), size


def test_small_functions_are_grouped_and_carry_their_symbols() -> None:
    chunks = code_chunks("zoo.go", GO, RagChunking(size=250, overlap=20))
    by_name = {s.name: (c, s) for c in chunks for s in c.symbols}
    assert set(by_name) == {"Greet", "Shout", "Count"}
    greet_chunk, greet = by_name["Greet"]
    assert greet.kind == "function" and greet.package == "zoo"
    assert greet_chunk.symbols == (greet,)  # Greet and Shout do not fit together
    assert greet.signature == "func Greet(a Animal) string"
    assert greet.doc == "// Greet says hello to an animal. // It never fails."
    assert (greet.start_line, greet.end_line) == (17, 22)
    shout_chunk, shout = by_name["Shout"]
    assert shout.kind == "method" and shout.receiver == "(a *Animal)"
    assert shout_chunk is by_name["Count"][0]  # Shout and Count fit together
    assert shout_chunk.ast_context().splitlines() == [
        "AST context:",
        "- Symbol: Shout",
        "- Kind: method",
        "- Receiver: (a *Animal)",
        "- Signature: func (a *Animal) Shout() string",
        "- Package: zoo",
        "- Lines: 24-26",
        "- Also contains: Count",
    ]
    # the package clause, imports and types are kept too, with no symbol
    head = [c for c in chunks if "package zoo" in c.content]
    assert len(head) == 1 and "type Animal struct" in head[0].content
    assert head[0].content.startswith("// Package zoo keeps animals.")


def test_a_function_bigger_than_a_chunk_is_cut_by_the_text_chunker() -> None:
    body = "".join(f'\tfmt.Println("line number {i} of a long function")\n' for i in range(30))
    source = f"package big\n\nfunc Small() int {{ return 1 }}\n\nfunc Long() {{\n{body}}}\n"
    chunking = RagChunking(size=300, overlap=40)
    chunks = code_chunks("big.go", source, chunking)
    long_text = source[source.index("func Long") :].strip()
    pieces = [c for c in chunks if c.symbols and c.symbols[0].name == "Long"]
    assert [c.content for c in pieces] == chunk_text(long_text, chunking)
    assert len(pieces) > 2 and all(len(c.content) <= 300 for c in chunks)
    (small,) = [c for c in chunks if "func Small" in c.content]
    assert "func Long" not in small.content and small.content.startswith("package big")


def test_other_files_and_go_files_without_functions_fall_back_to_text() -> None:
    chunking = RagChunking(size=120, overlap=10)
    for name, text in (
        ("zoo.rs", GO),  # Go source under another name is text
        ("notes.md", "A note " * 60),
        ("types.go", "package zoo\n\n" + "type A struct{ X int }\n" * 12),
    ):
        chunks = code_chunks(name, text, chunking)
        assert [c.content for c in chunks] == chunk_text(text, chunking), name
        assert all(not c.symbols and c.ast_context() == "" for c in chunks)


def test_a_broken_go_file_still_keeps_its_whole_functions() -> None:
    source = GO.replace("func (a *Animal) Shout() string {", "func (a *Animal) Shout( string {")
    chunks = code_chunks("zoo.go", source, RagChunking(size=300, overlap=20))
    assert any(FUNCTIONS["Count"] in c.content for c in chunks)
    assert re.sub(r"\s", "", "".join(c.content for c in chunks)) == re.sub(r"\s", "", source)


PY = '''\
"""A module."""

import os

# The greeting, as a constant.
GREETING = "hello"


@cache
def greet(name: str) -> str:
    """Say hello."""
    return f"{GREETING}, {name}"


class Keeper:
    """Looks after the zoo."""

    limit = 3

    def feed(self, animal: str) -> str:
        """Feed one animal."""
        return os.path.join("food", animal)

    async def clean(self) -> None:
        # sweep the floor
        await self.sweep()
'''


def test_a_python_file_is_cut_at_functions_and_a_big_class_at_its_methods() -> None:
    whole = code_chunks("keeper.py", PY, RagChunking(size=2000, overlap=20))
    assert len(whole) == 1 and [s.name for s in whole[0].symbols] == ["greet", "Keeper"]
    assert whole[0].symbols[1].kind == "class"
    assert whole[0].symbols[1].doc == "Looks after the zoo."

    chunks = code_chunks("keeper.py", PY, RagChunking(size=130, overlap=20))
    assert all(len(c.content) <= 130 for c in chunks)
    greet = [c for c in chunks if "def greet" in c.content]
    assert len(greet) == 1 and greet[0].content.startswith("@cache\ndef greet")
    (symbol,) = greet[0].symbols
    assert (symbol.signature, symbol.doc) == ("def greet(name: str) -> str:", "Say hello.")
    feed = next(s for c in chunks for s in c.symbols if s.name == "feed")
    assert (feed.kind, feed.receiver, feed.doc) == ("method", "Keeper", "Feed one animal.")
    clean = [c for c in chunks if "async def clean" in c.content]
    assert len(clean) == 1 and "# sweep the floor\n        await self.sweep()" in clean[0].content
    assert "- Class: Keeper" in clean[0].ast_context()
    assert re.sub(r"\s", "", "".join(c.content for c in chunks)) == re.sub(r"\s", "", PY)


def test_classes_nested_deeper_than_eight_are_not_opened_at_their_methods() -> None:
    lines = [" " * i + f"class C{i}:" for i in range(12)]
    body = " " * 16 + '"""' + "A long docstring. " * 20 + '"""'
    source = "\n".join(lines) + "\n" + " " * 12 + "def f(self):\n" + body + "\n"
    chunks = code_chunks("deep.py", source, RagChunking(size=200, overlap=20))
    names = {s.name for c in chunks for s in c.symbols}
    assert names == {"C8"}  # C0..C7 opened at their members; C8 cut as text, f inside it
    assert all(len(c.content) <= 200 for c in chunks)
    assert "class C11:" in "".join(c.content for c in chunks)
