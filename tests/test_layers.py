"""The dependency rule, checked on the source.

transport -> cluster -> actors -> (agents | persistence) -> domain.

Nothing imports transport except serve.py and cli.py; agents and persistence never import each
other; domain imports no other greenroom layer.

The clients sit beside the server and reach it only through its public HTTP/WebSocket API:
``client`` (the Python client core) and ``chat`` (the terminal client, over ``client``) import no
server module; ``web`` (the page's files) imports nothing; no server layer imports a client
(only transport reads web's files, to serve them). ``testing`` assembles a server and a client,
as the entry points do.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "greenroom"
LAYERS = ("domain", "persistence", "agents", "actors", "cluster", "transport")
CLIENTS = ("client", "chat", "web", "testing")
SERVER_MODULES = ("serve", "cli", "errors")

# layer -> layers it must not import
FORBIDDEN = {
    "domain": {"persistence", "agents", "actors", "transport", *CLIENTS},
    "persistence": {"agents", "actors", "transport", *CLIENTS},
    "agents": {"persistence", "actors", "transport", *CLIENTS},
    "actors": {"cluster", "transport", *CLIENTS},
    "cluster": {"transport", *CLIENTS},
    "transport": {"client", "chat", "testing"},
}
# client package -> the greenroom packages and modules it must not import
CLIENT_FORBIDDEN = {
    "client": {*LAYERS, *SERVER_MODULES, "chat", "web", "testing"},
    "chat": {*LAYERS, *SERVER_MODULES, "web", "testing"},
    "web": {*LAYERS, *SERVER_MODULES, "client", "chat", "testing"},
}


def imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            known = (*LAYERS, *CLIENTS, *SERVER_MODULES)
            if parts[0] == "greenroom" and len(parts) > 1 and parts[1] in known:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_follow_the_rule(layer: str) -> None:
    offenders = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        bad = imported_layers(path) & FORBIDDEN[layer]
        if bad:
            offenders.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
    assert offenders == []


@pytest.mark.parametrize("package", sorted(CLIENT_FORBIDDEN))
def test_clients_use_only_the_public_api(package: str) -> None:
    offenders = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        bad = imported_layers(path) & CLIENT_FORBIDDEN[package]
        if bad:
            offenders.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
    assert offenders == []


def test_server_modules_import_no_client() -> None:
    offenders = [
        path.name
        for path in PACKAGE.glob("*.py")
        if path.name != "cli.py" and imported_layers(path) & {"client", "chat", "testing"}
    ]
    assert offenders == []


def test_only_the_entry_points_import_transport() -> None:
    allowed = {"serve.py", "cli.py"}
    offenders = [
        path.name
        for path in PACKAGE.glob("*.py")
        if path.name not in allowed and "transport" in imported_layers(path)
    ]
    assert offenders == []


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from greenroom.transport import app\nimport greenroom.actors.registry\n"
        "from greenroom.serve import serve\nfrom greenroom.client import GreenroomClient\n"
    )
    assert imported_layers(bad) == {"transport", "actors", "serve", "client"}


# --- inside a package ------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports: at module level, inside functions and
    under ``TYPE_CHECKING`` alike (``from . import _x`` names the submodule, not the package)."""
    paths = {module_name(path): path for path in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    up = base[: len(base) - node.level + 1]
                    module = ".".join([*up, module] if module else up)
                subs = [f"{module}.{alias.name}" for alias in node.names]
                found = [sub for sub in subs if sub in paths]
                targets = found if len(found) == len(subs) else [module, *found]
            graph[name] |= {target for target in targets if target in paths and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import circles of ``graph``: its strongly connected parts of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = set()
            while True:
                member = stack.pop()
                part.add(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(part)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", ["actors"])
def test_a_package_imports_one_way(package: str) -> None:
    assert cycles(import_graph(PACKAGE / package)) == []


def test_the_cycle_finder_sees_a_circle(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []
