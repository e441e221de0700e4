"""The façade of ``greenroom.persistence`` (as trio's test_exports and httpx's
test_exported_members): the names it exports, that they live in private modules, and that the
only public module is ``postgres`` (public because psycopg is optional)."""

from __future__ import annotations

import pkgutil
import types

import greenroom.persistence as persistence
import greenroom.persistence.postgres as postgres

FACADE = {
    # the contracts
    "Store",
    "Persistence",
    "Writer",
    "EventReader",
    "Ownership",
    "Membership",
    "CommitBus",
    "CommitListener",
    "NullBus",
    "ProcessLog",
    "ProcessRecord",
    "Schedule",
    "ScheduleStore",
    # the stores
    "MemoryStore",
    "open_memory_store",
    "SqliteStore",
    "open_sqlite_store",
    "GroupCommitWriter",
    "WriterStatistics",
    # the log's values
    "DECISION_ACTIONS",
    "Decision",
    "DecisionAction",
    "EventRow",
    "HeadState",
    "Lease",
    "NodeInfo",
    "NodeState",
    "RecoveryPlan",
    "RetentionPolicy",
    "StoredEvent",
    "ToolCallIntent",
    "ToolCallRecord",
    "ToolCallState",
    "TurnEnd",
    "TurnMark",
    "TurnRecord",
    "TurnStart",
    "TurnState",
    # run records and the webhook outbox (issue 25)
    "Delivery",
    "DeliveryState",
    "RunLog",
    "RunRecord",
}


def test_the_package_exports_the_facade_and_nothing_else() -> None:
    public = {
        name
        for name in dir(persistence)
        if not name.startswith("_") and not isinstance(getattr(persistence, name), types.ModuleType)
    }
    assert public == FACADE
    assert sorted(persistence.__all__) == sorted(FACADE)


def test_what_it_exports_is_defined_in_private_modules() -> None:
    for name in FACADE:
        module = getattr(getattr(persistence, name), "__module__", None)
        if module is None or not module.startswith("greenroom."):  # aliases, constants
            continue
        assert module.rsplit(".", 1)[1].startswith("_"), f"{name} comes from {module}"


def test_postgres_is_the_only_public_module() -> None:
    modules = {info.name for info in pkgutil.iter_modules(persistence.__path__)}
    assert {name for name in modules if not name.startswith("_")} == {"postgres"}
    assert postgres.__all__ == ["PostgresStore", "describe", "open_postgres_store"]
