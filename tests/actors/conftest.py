"""Fixtures for actor tests: an in-memory store and a registry around it.

Actor tests run on trio's mock clock (``autojump_clock``) and order their steps with
``trio.testing.wait_all_tasks_blocked()``: no real sleeps. They use the in-memory store, never
SQLite, because thread offload and the autojump clock do not mix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from greenroom.actors import Registry, RegistryConfig, open_registry
from greenroom.persistence import MemoryStore, open_memory_store
from tests.fakes import FakeFactory, FakeRuntime


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    async with open_memory_store() as store:
        yield store


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime(hold=True)


@pytest.fixture
def factory(runtime: FakeRuntime) -> FakeFactory:
    return FakeFactory(runtime)


@pytest.fixture
def registry_config() -> RegistryConfig:
    return RegistryConfig()


@pytest.fixture
async def registry(
    store: MemoryStore, factory: FakeFactory, registry_config: RegistryConfig
) -> AsyncIterator[Registry]:
    async with open_registry(store, factory, registry_config) as registry:
        yield registry
