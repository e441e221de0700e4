"""Session stores and the durable event log: the :class:`Store` contract, the
:class:`Persistence` interfaces (writer, event reader, ownership, commit bus), an in-memory
implementation, an SQLite one, and a PostgreSQL one for several nodes
(:mod:`greenroom.persistence.postgres`, imported on its own: it needs psycopg). Both SQL stores
write through one group-commit engine (:class:`GroupCommitWriter`, their ``group_commit``).

The implementation modules are private; this package re-exports their public names
(``tests/persistence/test_exports.py`` pins them).
"""

from ._group_commit import (
    GroupCommitWriter as GroupCommitWriter,
    WriterStatistics as WriterStatistics,
)
from ._memory import MemoryStore as MemoryStore, open_memory_store as open_memory_store
from ._persistence import (
    CommitBus as CommitBus,
    CommitListener as CommitListener,
    EventReader as EventReader,
    Membership as Membership,
    NullBus as NullBus,
    Ownership as Ownership,
    Persistence as Persistence,
    Writer as Writer,
)
from ._process_log import ProcessLog as ProcessLog, ProcessRecord as ProcessRecord
from ._protocol import Store as Store
from ._records import (
    DECISION_ACTIONS as DECISION_ACTIONS,
    Decision as Decision,
    DecisionAction as DecisionAction,
    Delivery as Delivery,
    DeliveryState as DeliveryState,
    EventRow as EventRow,
    HeadState as HeadState,
    Lease as Lease,
    NodeInfo as NodeInfo,
    NodeState as NodeState,
    RecoveryPlan as RecoveryPlan,
    RetentionPolicy as RetentionPolicy,
    StoredEvent as StoredEvent,
    ToolCallIntent as ToolCallIntent,
    ToolCallRecord as ToolCallRecord,
    ToolCallState as ToolCallState,
    TurnEnd as TurnEnd,
    TurnMark as TurnMark,
    TurnRecord as TurnRecord,
    TurnStart as TurnStart,
    TurnState as TurnState,
)
from ._runs import RunLog as RunLog, RunRecord as RunRecord
from ._schedules import Schedule as Schedule, ScheduleStore as ScheduleStore
from ._sqlite import SqliteStore as SqliteStore, open_sqlite_store as open_sqlite_store

__all__ = [
    "DECISION_ACTIONS",
    "CommitBus",
    "CommitListener",
    "Decision",
    "DecisionAction",
    "Delivery",
    "DeliveryState",
    "EventReader",
    "EventRow",
    "GroupCommitWriter",
    "HeadState",
    "Lease",
    "Membership",
    "MemoryStore",
    "NodeInfo",
    "NodeState",
    "NullBus",
    "Ownership",
    "Persistence",
    "ProcessLog",
    "ProcessRecord",
    "RecoveryPlan",
    "RetentionPolicy",
    "RunLog",
    "RunRecord",
    "Schedule",
    "ScheduleStore",
    "SqliteStore",
    "Store",
    "StoredEvent",
    "ToolCallIntent",
    "ToolCallRecord",
    "ToolCallState",
    "TurnEnd",
    "TurnMark",
    "TurnRecord",
    "TurnStart",
    "TurnState",
    "Writer",
    "WriterStatistics",
    "open_memory_store",
    "open_sqlite_store",
]
