"""pytest fixtures for greenroom tests (needs pytest-trio). Enable in your ``conftest.py``::

    pytest_plugins = ["greenroom.testing.plugin"]

Fixtures:
    greenroom_agent: the :class:`ScriptedAgent` of source ``default`` (override it, or
        parametrize it indirectly).
    greenroom_store: ``"memory"`` (default) or ``"sqlite"``.
    greenroom: a running :class:`Greenroom` over those; ``greenroom.client`` is bound to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ._agents import ScriptedAgent
from ._server import Greenroom, StoreKind, open_greenroom


@pytest.fixture
def greenroom_agent() -> ScriptedAgent:
    return ScriptedAgent(turns=["Hello from the scripted model."], loop=True)


@pytest.fixture
def greenroom_store() -> StoreKind:
    return "memory"


@pytest.fixture
async def greenroom(
    greenroom_agent: ScriptedAgent, greenroom_store: StoreKind, tmp_path: Path
) -> AsyncIterator[Greenroom]:
    db = tmp_path / "greenroom.sqlite3" if greenroom_store == "sqlite" else None
    async with open_greenroom(greenroom_agent, store=greenroom_store, db_path=db) as server:
        yield server
