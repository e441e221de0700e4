"""Domain values of greenroom: sessions, history items, messages and runtime events.

Everything here is a frozen attrs value or a pure function; no I/O. JSON conversion lives in
`_json.py`, re-exported below (``parse``, ``to_json``, ...).
"""

from ._events import (
    EVENT_TAGS as EVENT_TAGS,
)
from ._events import (
    AgentChoice as AgentChoice,
)
from ._events import (
    AgentChoiceReasoning as AgentChoiceReasoning,
)
from ._events import (
    AgentInfo as AgentInfo,
)
from ._events import (
    ElicitationRequest as ElicitationRequest,
)
from ._events import (
    ErrorEvent as ErrorEvent,
)
from ._events import (
    Event as Event,
)
from ._events import (
    Gap as Gap,
)
from ._events import (
    MaxIterationsReached as MaxIterationsReached,
)
from ._events import (
    RawEvent as RawEvent,
)
from ._events import (
    SessionExited as SessionExited,
)
from ._events import (
    SessionTitle as SessionTitle,
)
from ._events import (
    StreamStarted as StreamStarted,
)
from ._events import (
    StreamStopped as StreamStopped,
)
from ._events import (
    TokenUsage as TokenUsage,
)
from ._events import (
    TokenUsageInfo as TokenUsageInfo,
)
from ._events import (
    ToolCallConfirmation as ToolCallConfirmation,
)
from ._events import (
    ToolCallEvent as ToolCallEvent,
)
from ._events import (
    ToolCallResponse as ToolCallResponse,
)
from ._events import (
    UserMessage as UserMessage,
)
from ._events import (
    Warning as Warning,
)
from ._events import (
    event_type as event_type,
)
from ._export import (
    all_errors as all_errors,
)
from ._export import (
    batch_export as batch_export,
)
from ._export import (
    recovery_export as recovery_export,
)
from ._history import (
    branch as branch,
)
from ._history import (
    count_user_messages as count_user_messages,
)
from ._history import (
    next_fork_title as next_fork_title,
)
from ._history import (
    token_totals as token_totals,
)
from ._history import (
    user_message_index as user_message_index,
)
from ._history import (
    visible_messages as visible_messages,
)
from ._json import (
    converter as converter,
)
from ._json import (
    event_from_json as event_from_json,
)
from ._json import (
    event_to_json as event_to_json,
)
from ._json import (
    format_datetime as format_datetime,
)
from ._json import (
    item_from_json as item_from_json,
)
from ._json import (
    item_to_json as item_to_json,
)
from ._json import (
    parse as parse,
)
from ._json import (
    parse_datetime as parse_datetime,
)
from ._json import (
    to_json as to_json,
)
from ._truncate import (
    MARKER as MARKER,
)
from ._truncate import (
    cap_tool_result as cap_tool_result,
)
from ._truncate import (
    estimate_tokens as estimate_tokens,
)
from ._truncate import (
    truncate_middle as truncate_middle,
)
from ._types import (
    ROLES as ROLES,
)
from ._types import (
    ChatMessage as ChatMessage,
)
from ._types import (
    ErrorItem as ErrorItem,
)
from ._types import (
    FunctionCall as FunctionCall,
)
from ._types import (
    ImageURL as ImageURL,
)
from ._types import (
    Item as Item,
)
from ._types import (
    Message as Message,
)
from ._types import (
    MessagePart as MessagePart,
)
from ._types import (
    Permissions as Permissions,
)
from ._types import (
    Role as Role,
)
from ._types import (
    Session as Session,
)
from ._types import (
    SessionSummary as SessionSummary,
)
from ._types import (
    SubSession as SubSession,
)
from ._types import (
    Summary as Summary,
)
from ._types import (
    ToolCall as ToolCall,
)
from ._types import (
    Usage as Usage,
)
from ._types import (
    frozen_map as frozen_map,
)
from ._types import (
    new_id as new_id,
)
from ._types import (
    utcnow as utcnow,
)
