"""Agents: the Runtime contract, agent files, model providers and the agent loop."""

from ._runtime import (
    BuiltRuntime as BuiltRuntime,
)
from ._runtime import (
    Command as Command,
)
from ._runtime import (
    CurrentAgent as CurrentAgent,
)
from ._runtime import (
    ElicitationSink as ElicitationSink,
)
from ._runtime import (
    ModelChoice as ModelChoice,
)
from ._runtime import (
    QueuedMessage as QueuedMessage,
)
from ._runtime import (
    QueueStatus as QueueStatus,
)
from ._runtime import (
    RecallHandler as RecallHandler,
)
from ._runtime import (
    ResumeRequest as ResumeRequest,
)
from ._runtime import (
    Runtime as Runtime,
)
from ._runtime import (
    RuntimeFactory as RuntimeFactory,
)
from ._runtime import (
    SupportsRecall as SupportsRecall,
)
from ._runtime import (
    TitleGenerator as TitleGenerator,
)
from ._runtime import (
    TurnIO as TurnIO,
)
from ._runtime import (
    mirrors_elicitation as mirrors_elicitation,
)
from ._runtime import (
    supports_recall as supports_recall,
)
