"""Fixtures of the transport tests.

``env``: the quart-trio app over a registry with a FakeFactory (handing out ``runtime``), an
in-memory store and a fake AgentCatalog. Tests change the pieces by parametrizing the fixtures
``runtime_class`` and ``runtime_options`` (its keyword arguments), ``app_config`` or
``registry_config``.

``live``: that app served by hypercorn on 127.0.0.1:0 inside the test, wrapped in ClientLimits
and ShieldedSend and configured like ``greenroom serve`` (socket options included). Live-server
tests run on the real clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import hypercorn.trio
import pytest
import trio
from quart.testing import QuartClient

from greenroom.actors import RegistryConfig, open_registry
from greenroom.persistence import MemoryStore, open_memory_store
from greenroom.serve import ServeConfig, hypercorn_config
from greenroom.transport import AppConfig, ClientLimits, ShieldedSend, create_app
from tests.fakes import FakeFactory, FakeRuntime
from tests.transport.support import AGENT, Env, FakeCatalog, Live


@pytest.fixture
def runtime_options() -> dict[str, Any]:
    return {}


@pytest.fixture
def runtime_class() -> type[FakeRuntime]:
    return FakeRuntime


@pytest.fixture
def runtime(runtime_class: type[FakeRuntime], runtime_options: dict[str, Any]) -> FakeRuntime:
    return runtime_class(**runtime_options)


@pytest.fixture
def app_config() -> AppConfig:
    return AppConfig()


@pytest.fixture
def registry_config() -> RegistryConfig:
    return RegistryConfig()


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    async with open_memory_store() as store:
        yield store


@pytest.fixture
async def env(
    store: MemoryStore,
    runtime: FakeRuntime,
    app_config: AppConfig,
    registry_config: RegistryConfig,
) -> AsyncIterator[Env]:
    factory = FakeFactory(runtime, sources=(AGENT,))
    async with open_registry(store, factory, registry_config) as registry:
        app = create_app(registry, FakeCatalog(), app_config)
        yield Env(app, registry, runtime, factory, store)
        runtime.release()  # a held turn must not keep the registry from closing


@pytest.fixture
def client(env: Env) -> QuartClient:
    """Quart's in-process test client of ``env.app``."""
    return cast(QuartClient, env.app.test_client())


@pytest.fixture
def keep_alive_timeout() -> float | None:
    return None  # greenroom serve's own


@pytest.fixture
def max_connections_per_client() -> int:
    return ServeConfig().max_connections_per_client


@pytest.fixture
async def live(
    env: Env, keep_alive_timeout: float | None, max_connections_per_client: int
) -> AsyncIterator[Live]:
    config = hypercorn_config(ServeConfig(host="127.0.0.1", port=0, graceful_timeout=1.0))
    if keep_alive_timeout is not None:
        config.keep_alive_timeout = keep_alive_timeout
    app = ClientLimits(ShieldedSend(env.app), max_connections_per_client)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            lambda task_status: hypercorn.trio.serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield Live(binds[0], env)
        # Shut down like greenroom serve: end streams and sockets first, then hypercorn.
        env.app.greenroom.shutting_down.set()  # type: ignore[attr-defined]
        env.registry.end_subscriptions()
        env.registry.cancel_turns()
        stop.set()
        nursery.cancel_scope.deadline = trio.current_time() + 10
    assert not nursery.cancel_scope.cancelled_caught, "the live server did not stop in 10 s"
