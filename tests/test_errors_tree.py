"""The tree drawn in ``errors.py``'s docstring is the class tree: same classes, parents, statuses
and codes (httpx pins its exception edge the same way, in ``tests/test_exceptions.py``)."""

from __future__ import annotations

import inspect
import re

import attrs
import pytest

import greenroom.errors
from greenroom.errors import GreenroomError

# "    │   ├── InvalidMessageId             400 invalid_message_id  (a note)"
_NODE = re.compile(
    r"(?P<branch>[ │├└─]*)(?P<name>[A-Z]\w*) +(?P<status>\d{3}) (?P<code>[a-z_]+)(?: +\(.*\))?"
)
_LEVEL = 4  # characters of drawing per level: "├── " or "│   "


@attrs.frozen
class Drawn:
    name: str
    parent: str | None
    status: int
    code: str


def drawn_tree(doc: str) -> list[Drawn]:
    """The classes of the ``::`` block in ``doc``, each with the class drawn above it."""
    block = doc.split("::\n", 1)[1].strip("\n").split("\n\n", 1)[0]
    drawn: list[Drawn] = []
    path: list[str] = []  # the names from the root down to the last line's parent
    for line in block.splitlines():
        match = _NODE.fullmatch(line.removeprefix("    ").rstrip())
        assert match, f"a line of the drawing that is no class: {line!r}"
        depth, rest = divmod(len(match["branch"]), _LEVEL)
        assert rest == 0 and depth <= len(path), f"misaligned: {line!r}"
        del path[depth:]
        parent = path[-1] if path else None
        drawn.append(Drawn(match["name"], parent, int(match["status"]), match["code"]))
        path.append(match["name"])
    return drawn


DRAWN = drawn_tree(greenroom.errors.__doc__ or "")
CLASSES = {
    name: value
    for name, value in vars(greenroom.errors).items()
    if inspect.isclass(value)
    and issubclass(value, BaseException)
    and value.__module__ == greenroom.errors.__name__
}


def test_the_drawing_has_one_root_and_no_class_twice() -> None:
    names = [node.name for node in DRAWN]
    assert len(names) == len(set(names))
    assert [node.name for node in DRAWN if node.parent is None] == ["GreenroomError"]


@pytest.mark.parametrize("node", DRAWN, ids=lambda node: node.name)
def test_each_drawn_class_has_its_parent_status_and_code(node: Drawn) -> None:
    assert node.name in CLASSES, f"{node.name} is drawn but not defined"
    cls = CLASSES[node.name]
    parent = Exception if node.parent is None else CLASSES[node.parent]
    assert cls.__bases__ == (parent,)
    assert issubclass(cls, GreenroomError)
    assert (cls.status, cls.code) == (node.status, node.code)


def test_every_error_class_is_drawn_and_exported() -> None:
    drawn = {node.name for node in DRAWN}
    assert set(CLASSES) == drawn
    assert set(greenroom.errors.__all__) == drawn


def test_the_parser_sees_a_wrong_drawing() -> None:
    doc = """::

    GreenroomError                       500 internal_error
    ├── NotFound                         404 not_found
    │   └── SessionNotFound              404 session_not_found   (a note)
    └── StoreError                       500 store_error

Prose."""
    assert drawn_tree(doc) == [
        Drawn("GreenroomError", None, 500, "internal_error"),
        Drawn("NotFound", "GreenroomError", 404, "not_found"),
        Drawn("SessionNotFound", "NotFound", 404, "session_not_found"),
        Drawn("StoreError", "GreenroomError", 500, "store_error"),
    ]
    with pytest.raises(AssertionError, match="misaligned"):
        drawn_tree(
            "::\n\n    GreenroomError  500 internal_error\n      ├── NotFound  404 not_found\n"
        )
