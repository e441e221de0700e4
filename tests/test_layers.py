"""The dependency rule, checked on the source.

transport -> cluster -> actors -> (agents | persistence) -> domain.

Nothing imports transport except the serve package and cli.py; agents and persistence never
import each other; domain imports no other greenroom layer.

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


def server_modules() -> list[Path]:
    """The modules above the layers: greenroom/*.py and the serve package."""
    return [*sorted(PACKAGE.glob("*.py")), *sorted((PACKAGE / "serve").rglob("*.py"))]


def test_server_modules_import_no_client() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in server_modules()
        if path.name != "cli.py" and imported_layers(path) & {"client", "chat", "testing"}
    ]
    assert offenders == []


def test_only_the_entry_points_import_transport() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in server_modules()
        if path.parent.name != "serve"
        and path.name != "cli.py"
        and "transport" in imported_layers(path)
    ]
    assert offenders == []


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from greenroom.transport import app\nimport greenroom.actors.registry\n"
        "from greenroom.serve import serve\nfrom greenroom.client import GreenroomClient\n"
    )
    assert imported_layers(bad) == {"transport", "actors", "serve", "client"}
