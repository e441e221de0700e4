"""Session actors: one trio task per live session, the registry that runs them, event logs."""

from ._commands import (
    DecisionOutcome as DecisionOutcome,
    FollowUpInjector as FollowUpInjector,
    FollowUpResult as FollowUpResult,
    QueueDepth as QueueDepth,
    RunStream as RunStream,
    SessionSnapshot as SessionSnapshot,
    SessionStatus as SessionStatus,
)
from ._eventlog import EventLog as EventLog, LogEntry as LogEntry, Subscription as Subscription
from ._handle import SessionHandle as SessionHandle, StreamGuard as StreamGuard
from ._handlers import normalize_confirmation as normalize_confirmation
from ._recovery import (
    RecoveryReport as RecoveryReport,
    plan_recovery as plan_recovery,
    recover as recover,
    recover_session as recover_session,
)
from ._registry import (
    EventSource as EventSource,
    Registry as Registry,
    RegistryConfig as RegistryConfig,
    open_registry as open_registry,
)
from ._session import SessionActor as SessionActor, StreamState as StreamState
from ._switch import apply_agent_switch_commands as apply_agent_switch_commands
