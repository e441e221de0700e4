"""Fixtures of the cluster tests: PostgreSQL (or a skip), the slow fake model, and a cluster
of nodes on a scratch database (the test starts the nodes it needs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cluster._nodes import Cluster, cluster
from tests.crash_support import ServerFiles, SlowModel, fake_model


@pytest.fixture
def model() -> SlowModel:
    """20 tokens at 20 per second, then the side-effect tool (which sleeps 0.2 s)."""
    return SlowModel(tokens=20, delay=0.05, tool_sleep=0.2)


@pytest.fixture
async def nodes(tmp_path: Path, model: SlowModel) -> AsyncIterator[Cluster]:
    async with fake_model(model) as fake, cluster(ServerFiles(tmp_path, fake.url)) as started:
        yield started


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this directory is a ``cluster`` test (``-m cluster`` / ``-m "not
    cluster"``), whichever module it is in."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.cluster)
