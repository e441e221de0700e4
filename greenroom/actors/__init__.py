"""Session actors: one trio task per live session, the registry that runs them, event logs."""

from ._context import RegistryConfig as RegistryConfig
from ._entries import LogEntry as LogEntry
from ._eventlog import (
    DEFAULT_SUBSCRIBER_BUFFER as DEFAULT_SUBSCRIBER_BUFFER,
    IDLE_RING as IDLE_RING,
    EventLog as EventLog,
)
from ._handle import SessionHandle as SessionHandle, StreamGuard as StreamGuard
from ._logs import EventLogs as EventLogs, EventSource as EventSource
from ._processes import (
    StoreProcessLedger as StoreProcessLedger,
    host_id as host_id,
    kill_leftover_groups as kill_leftover_groups,
)
from ._readiness import Readiness as Readiness
from ._recovery import (
    RecoveryReport as RecoveryReport,
    plan_recovery as plan_recovery,
    recover as recover,
    recover_session as recover_session,
)
from ._registry import Registry as Registry, open_registry as open_registry
from ._results import (
    DecisionOutcome as DecisionOutcome,
    DisconnectPolicy as DisconnectPolicy,
    FollowUpInjector as FollowUpInjector,
    FollowUpResult as FollowUpResult,
    QueueDepth as QueueDepth,
    RunStream as RunStream,
    SessionSnapshot as SessionSnapshot,
    SessionStatistics as SessionStatistics,
    SessionStatus as SessionStatus,
    StreamState as StreamState,
)
from ._runs import (
    RunFacts as RunFacts,
    answer_json as answer_json,
    run_json as run_json,
)
from ._scheduler import (
    RemoteFire as RemoteFire,
    Scheduler as Scheduler,
    ScheduleSpec as ScheduleSpec,
)
from ._subscription import Subscription as Subscription
from ._switch import apply_agent_switch_commands as apply_agent_switch_commands
