"""The dependency rule, checked on the source.

transport -> cluster -> actors -> (agents | persistence) -> domain; every server layer but
domain may use observe (metrics, traces, logs), which imports none of them.

Nothing imports transport except the serve package and cli.py; agents and persistence never
import each other; domain imports no other greenroom layer.

The clients sit beside the server and reach it only through its public HTTP/WebSocket API:
``client`` (the Python client core) and ``chat`` (the terminal client, over ``client``) import no
server module; ``web`` (the page's files) imports nothing; no server layer imports a client
(only transport reads web's files, to serve them). ``testing`` assembles a server and a client,
as the entry points do.

Inside ``agents`` the layers run providers → contract → config → tools/mcp → agent files →
runtime (``AGENTS_LAYERS``), counting type-level and function-local imports too; only the
runtime's factory reads agent files, and no import cycle spans more than three files.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "greenroom"
LAYERS = ("observe", "domain", "persistence", "agents", "actors", "cluster", "transport")
CLIENTS = ("client", "chat", "web", "testing")
SERVER_MODULES = ("serve", "cli", "errors", "transfer")

# layer -> layers it must not import
FORBIDDEN = {
    "observe": {"domain", "persistence", "agents", "actors", "cluster", "transport", *CLIENTS},
    "domain": {"observe", "persistence", "agents", "actors", "transport", *CLIENTS},
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
    """The modules above the layers: greenroom/*.py, the serve and transfer packages."""
    return [
        *sorted(PACKAGE.glob("*.py")),
        *sorted((PACKAGE / "serve").rglob("*.py")),
        *sorted((PACKAGE / "transfer").rglob("*.py")),  # greenroom import / export
    ]


def test_only_the_command_line_imports_transfer() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "cli.py"
        and path.parent.name != "transfer"
        and "transfer" in imported_layers(path)
    ]
    assert offenders == []


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


# --- inside greenroom/agents ---------------------------------------------------------------------

# The layers of the agents package, from the bottom up: a module may import its own layer and the
# ones below it. A package (providers/, tools/, mcp/) is one entry; the package face
# (agents/__init__.py) sits on top. Some runtime modules (_fallback, _titles, _prompt, _models,
# _frame) need nothing above config, but belong with the runtime that uses them.
AGENTS_LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("providers", frozenset({"providers"})),  # imports only domain and errors
    (
        "contract",
        frozenset(
            {
                "_runtime",
                "_tool_values",
                "_elicitation",
                "_oauth_flows",
                "_permissions",
                "_command_parse",
                "_queue",
                "_confirm",
                "_commands",
            }
        ),
    ),
    ("config", frozenset({"_config", "_toolset_types", "_yaml_checks", "_rag_config"})),
    ("tools", frozenset({"tools", "mcp"})),
    (
        "agent files",
        frozenset(
            {
                "_yaml",
                "_yaml_models",
                "_yaml_facts",
                "_yaml_context",
                "_yaml_output",
                "_yaml_lsp",
                "_yaml_rag",
                "_sources",
                "_diagnose",
                "_validate",
                "_source_refs",
                "_agent_fetch",
                "_remote_sources",
                "_yaml_external",
                "_validate_remote",
            }
        ),
    ),
    (
        "runtime",
        frozenset(
            {
                "_factory",
                "_local",
                "_loop",
                "_toolcalls",
                "_delegation",
                "_background",
                "_background_tools",
                "_frame",
                "_models",
                "_fallback",
                "_titles",
                "_prompt",
                "_tokens",
                "_compaction",
                "_spending",
                "_environment",
                "_hooks",
                "_answer_schema",
                "_codemode",
                "_js_sandbox",
                "_js_worker",
            }
        ),
    ),
    ("face", frozenset({"__init__"})),
)
AGENTS_MAX_CYCLE = 3
"""Files one import cycle inside greenroom/agents may span (counting every kind of import)."""


def package_imports(root: Path, package: str = "greenroom.agents") -> dict[str, set[str]]:
    """Each module of ``package`` (under ``root``) → the modules of ``package`` it imports.

    Every import counts: at module level, inside functions and under ``TYPE_CHECKING``; relative
    ones are resolved. ``from p import name`` counts as importing the module ``p.name`` when
    there is one, else ``p``; importing ``p.m`` counts as importing ``p.m`` only, not the
    package ``p`` it lies in.
    """
    base = root.joinpath(*package.split("."))
    modules: dict[str, Path] = {}
    for path in base.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                origin = node.module or ""
                if node.level:
                    start = here[: len(here) - node.level + 1]
                    origin = ".".join([*start, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{origin}.{alias.name}"
                    targets.append(sub if sub in modules else origin)
        found: set[str] = set()
        for target in targets:
            parts = target.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()  # a name inside a module: the module
            if parts and ".".join(parts) != name:
                found.add(".".join(parts))
        graph[name] = found
    return graph


def agents_layer(module: str) -> int | None:
    """The index in AGENTS_LAYERS of a ``greenroom.agents`` module (None: not placed)."""
    parts = module.split(".")[2:]
    key = parts[0] if parts else "__init__"
    return next((i for i, (_, members) in enumerate(AGENTS_LAYERS) if key in members), None)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module in sorted(graph):
        mine = agents_layer(module)
        for target in sorted(graph[module]):
            theirs = agents_layer(target)
            if mine is not None and theirs is not None and theirs > mine:
                out.append(
                    f"{module} ({AGENTS_LAYERS[mine][0]}) imports {target} "
                    f"({AGENTS_LAYERS[theirs][0]})"
                )
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` with more than one module."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += graph.get(module, ())
        return seen

    reach = {module: reachable(module) for module in graph}
    done: set[str] = set()
    cycles = []
    for module in sorted(graph):
        if module in done:
            continue
        component = {module} | {other for other in reach[module] if module in reach[other]}
        done |= component
        if len(component) > 1:
            cycles.append(component)
    return cycles


def test_every_agents_module_has_a_layer() -> None:
    unplaced = [m for m in sorted(package_imports(PACKAGE.parent)) if agents_layer(m) is None]
    assert unplaced == []


def test_agents_modules_import_only_their_layer_or_lower() -> None:
    assert layer_violations(package_imports(PACKAGE.parent)) == []


def test_only_the_factory_of_the_runtime_reads_agent_files() -> None:
    names = [name for name, _ in AGENTS_LAYERS]
    runtime, files = names.index("runtime"), names.index("agent files")
    graph = package_imports(PACKAGE.parent)
    offenders = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if agents_layer(module) == runtime and not module.endswith("._factory")
        for target in sorted(targets)
        if agents_layer(target) == files
    ]
    assert offenders == []


def test_no_import_cycle_in_agents_spans_more_than_three_files() -> None:
    cycles = import_cycles(package_imports(PACKAGE.parent))
    assert [sorted(c) for c in cycles if len(c) > AGENTS_MAX_CYCLE] == []


def test_the_agents_checks_see_an_upward_import_and_a_long_cycle(tmp_path: Path) -> None:
    agents = tmp_path / "greenroom" / "agents"
    (agents / "tools").mkdir(parents=True)
    (tmp_path / "greenroom" / "__init__.py").write_text("")
    (agents / "__init__.py").write_text("")
    (agents / "_runtime.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .tools import ToolResult\n"
    )
    (agents / "tools" / "__init__.py").write_text("from ._base import ToolResult\n")
    (agents / "tools" / "_base.py").write_text("def f():\n    from .. import _config\n")
    (agents / "_config.py").write_text("from greenroom.agents._runtime import Command\n")
    graph = package_imports(tmp_path)
    assert graph["greenroom.agents._runtime"] == {"greenroom.agents.tools"}
    assert graph["greenroom.agents.tools._base"] == {"greenroom.agents._config"}
    assert layer_violations(graph) == [
        "greenroom.agents._runtime (contract) imports greenroom.agents.tools (tools)"
    ]
    assert [len(c) for c in import_cycles(graph)] == [4]


# --- the other packages: one way ------------------------------------------------------------

ONE_WAY = ("actors", "persistence", "domain", "transport", "client", "serve", "cluster", "testing")
"""Packages whose modules import in one direction only (no import cycle of any kind). chat's
command tables name ``ChatApp`` for typing only (a type-level circle of three), agents' is
bounded above."""


@pytest.mark.parametrize("package", ONE_WAY)
def test_a_package_imports_one_way(package: str) -> None:
    graph = package_imports(PACKAGE.parent, f"greenroom.{package}")
    assert [sorted(cycle) for cycle in import_cycles(graph)] == []


def test_a_type_level_back_edge_is_a_cycle(tmp_path: Path) -> None:
    actors = tmp_path / "greenroom" / "actors"
    actors.mkdir(parents=True)
    (tmp_path / "greenroom" / "__init__.py").write_text("")
    (actors / "__init__.py").write_text("from ._session import Actor\n")
    (actors / "_session.py").write_text("from . import _handlers as h\nclass Actor: ...\n")
    (actors / "_handlers.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._session import Actor\n"
    )
    graph = package_imports(tmp_path, "greenroom.actors")
    assert import_cycles(graph) == [{"greenroom.actors._session", "greenroom.actors._handlers"}]
