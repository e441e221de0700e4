"""Domain values of greenroom: sessions, history items, messages and runtime events.

Everything here is a frozen attrs value or a pure function; no I/O. JSON conversion lives in
`_json.py`, re-exported below (``parse``, ``to_json``, ...).
"""

from ._events import (
    DELTA_TYPES as DELTA_TYPES,
    EVENT_TAGS as EVENT_TAGS,
    AgentChoice as AgentChoice,
    AgentChoiceReasoning as AgentChoiceReasoning,
    AgentInfo as AgentInfo,
    ElicitationRequest as ElicitationRequest,
    ErrorEvent as ErrorEvent,
    Event as Event,
    Gap as Gap,
    MaxIterationsReached as MaxIterationsReached,
    RawEvent as RawEvent,
    SessionExited as SessionExited,
    SessionTitle as SessionTitle,
    StreamStarted as StreamStarted,
    StreamStopped as StreamStopped,
    TokenUsage as TokenUsage,
    TokenUsageInfo as TokenUsageInfo,
    ToolCallConfirmation as ToolCallConfirmation,
    ToolCallDecided as ToolCallDecided,
    ToolCallEvent as ToolCallEvent,
    ToolCallInDoubt as ToolCallInDoubt,
    ToolCallResponse as ToolCallResponse,
    TurnInterrupted as TurnInterrupted,
    UserMessage as UserMessage,
    Warning as Warning,
    event_type as event_type,
)
from ._export import (
    all_errors as all_errors,
    batch_export as batch_export,
    recovery_export as recovery_export,
)
from ._history import (
    branch as branch,
    count_user_messages as count_user_messages,
    next_fork_title as next_fork_title,
    token_totals as token_totals,
    user_message_index as user_message_index,
    visible_messages as visible_messages,
)
from ._json import (
    WIRE_HIDDEN as WIRE_HIDDEN,
    WIRE_RENAMES as WIRE_RENAMES,
    converter as converter,
    encode_event as encode_event,
    event_from_json as event_from_json,
    event_to_json as event_to_json,
    format_datetime as format_datetime,
    item_from_json as item_from_json,
    item_to_json as item_to_json,
    parse as parse,
    parse_datetime as parse_datetime,
    to_json as to_json,
)
from ._lenient import known_keys_only as known_keys_only, parse_lenient as parse_lenient
from ._limits import (
    INT64_MAX as INT64_MAX,
    INT64_MIN as INT64_MIN,
    MAX_NAME as MAX_NAME,
    MAX_PATH as MAX_PATH,
    MAX_TITLE as MAX_TITLE,
    Amount as Amount,
    Count as Count,
    Length as Length,
    Name as Name,
    NonBlank as NonBlank,
    PathText as PathText,
    Pattern as Pattern,
    PlainName as PlainName,
    Range as Range,
    Title as Title,
    check_text as check_text,
    check_value as check_value,
)
from ._truncate import (
    MARKER as MARKER,
    cap_tool_result as cap_tool_result,
    estimate_tokens as estimate_tokens,
    truncate_middle as truncate_middle,
)
from ._types import (
    ROLES as ROLES,
    Approval as Approval,
    ChatMessage as ChatMessage,
    ErrorItem as ErrorItem,
    FunctionCall as FunctionCall,
    ImageURL as ImageURL,
    Item as Item,
    Message as Message,
    MessagePart as MessagePart,
    Permissions as Permissions,
    Role as Role,
    Session as Session,
    SessionSummary as SessionSummary,
    SubSession as SubSession,
    Summary as Summary,
    ToolCall as ToolCall,
    Usage as Usage,
    frozen_map as frozen_map,
    new_id as new_id,
    utcnow as utcnow,
)
