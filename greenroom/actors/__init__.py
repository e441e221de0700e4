"""Session actors: one trio task per live session, the registry that runs them, event logs."""

from ._commands import (
    FollowUpInjector as FollowUpInjector,
)
from ._commands import (
    FollowUpResult as FollowUpResult,
)
from ._commands import (
    QueueDepth as QueueDepth,
)
from ._commands import (
    RunStream as RunStream,
)
from ._commands import (
    SessionSnapshot as SessionSnapshot,
)
from ._commands import (
    SessionStatus as SessionStatus,
)
from ._eventlog import EventLog as EventLog
from ._eventlog import LogEntry as LogEntry
from ._eventlog import Subscription as Subscription
from ._handlers import normalize_confirmation as normalize_confirmation
from ._registry import (
    EventSource as EventSource,
)
from ._registry import (
    Registry as Registry,
)
from ._registry import (
    RegistryConfig as RegistryConfig,
)
from ._registry import (
    SessionHandle as SessionHandle,
)
from ._registry import (
    StreamGuard as StreamGuard,
)
from ._registry import (
    open_registry as open_registry,
)
from ._session import SessionActor as SessionActor
from ._session import StreamState as StreamState
from ._switch import apply_agent_switch_commands as apply_agent_switch_commands
