"""The one exception tree of greenroom.

Every error a client can see is a :class:`GreenroomError`. Each class carries the HTTP status and
the stable machine ``code`` the transports put on the wire (and, if a client should retry, the
``retry_after`` seconds of the ``Retry-After`` header), so the mapping to REST statuses and
WebSocket error frames happens in exactly one place: here.

::

    GreenroomError                       500 internal_error
    ├── InvalidRequest                   400 invalid_request   (.path names the bad field)
    │   ├── InvalidMessageId             400 invalid_message_id
    │   ├── ForkOutOfRange               400 fork_out_of_range
    │   ├── ForkInSubSession             400 fork_in_sub_session
    │   ├── InvalidWorkingDir            400 invalid_working_dir
    │   ├── UnstorableValue              400 unstorable_value    (a store refused a value)
    │   ├── AgentSwitchFailed            400 agent_switch_failed
    │   ├── ConfigError                  400 config_error        (server start-up options)
    │   └── AgentConfigError             400 invalid_agent_config (``file:line: path: problem``)
    ├── Unauthorized                     401 unauthorized
    ├── CrossSiteRequest                 403 cross_site_request  (Origin not allowed)
    ├── NotFound                         404 not_found
    │   ├── SessionNotFound              404 session_not_found
    │   ├── MessageNotFound              404 message_not_found
    │   ├── AgentNotFound                404 agent_not_found
    │   ├── ToolCallNotFound             404 tool_call_not_found (none in doubt by that id)
    │   ├── RunNotFound                  404 run_not_found (no run of the session by that id)
    │   ├── ScheduleNotFound             404 schedule_not_found
    │   └── OAuthFlowNotFound            404 oauth_flow_not_found (no flow waits for that state)
    ├── SessionBusy                      409 session_busy
    ├── SessionNotRunning                409 session_not_running
    ├── NoPendingRequest                 409 no_pending_request
    ├── NeedsDecision                    409 needs_decision      (tool calls in doubt)
    ├── AgentMismatch                    409 agent_mismatch      (the run names another agent)
    ├── PayloadTooLarge                  413 payload_too_large
    ├── UnsupportedMediaType             415 unsupported_media_type
    ├── HostNotAllowed                   421 host_not_allowed    (DNS rebinding guard)
    ├── OwnedElsewhere                   421 owned_elsewhere     (another node owns the session)
    ├── ModelSwitchingNotSupported       422 model_switching_not_supported
    ├── RerunNotSupported                422 rerun_not_supported
    ├── CompactionNotSupported           422 compaction_not_supported
    ├── BudgetExceeded                   402 budget_exceeded     (max_cost / --max-session-cost)
    ├── ToolCallLoop                     422 max_consecutive_tool_calls (one call repeated)
    ├── QueueFull                        429 queue_full          (.retry_after seconds)
    │   └── TooManyConnections           429 too_many_connections (per client address)
    ├── AgentSourceUnavailable           502 agent_source_unavailable
    ├── ModelError                       502 model_error         (a model call failed)
    │   ├── ModelKeyMissing              502 missing_api_key
    │   ├── ModelRateLimited             502 rate_limited        (retries exhausted)
    │   ├── ModelTimeout                 502 model_timeout
    │   ├── ModelStreamMalformed         502 malformed_stream
    │   ├── ModelContextOverflow         502 context_exceeded    (the prompt exceeds the window)
    │   └── StructuredOutputMismatch     502 structured_output_mismatch
    ├── SessionGone                      503 session_gone        (the actor stopped mid-call)
    ├── WaitTimedOut                     503 wait_timed_out      (?timeout= / ?wait= ran out)
    ├── ShuttingDown                     503 shutting_down
    ├── OwnerUnavailable                 503 owner_unavailable   (owner silent, lease not expired)
    ├── NodeFenced                       503 node_fenced         (this node lost its lease)
    └── StoreError                       500 store_error
        ├── SessionExists                500 store_error         (the id is taken; a tombstone too)
        ├── DatabaseUnavailable          503 database_unavailable (connection lost; retry)
        └── DatabaseError                500 database_error      (opening a database failed)
            ├── NotADatabase             500 not_a_database      (not a greenroom database)
            ├── NewerDatabase            500 newer_database      (written by a newer schema)
            ├── DatabaseReadOnly         500 database_read_only  (file or directory read-only)
            └── DatabaseInUse            500 database_in_use     (another process holds it)

Statuses and codes live here; an operation may override one for its own route in
``transport/_ops.py`` (``Operation.overrides``), as docker-agent answers some routes differently.
"""

from __future__ import annotations

from typing import ClassVar

# fmt: off
__all__ = [  # every class of the tree (tests/test_errors_tree.py keeps them equal)
    "AgentConfigError", "AgentMismatch", "AgentNotFound", "AgentSourceUnavailable",
    "AgentSwitchFailed", "BudgetExceeded", "CompactionNotSupported", "ConfigError",
    "CrossSiteRequest", "DatabaseError", "DatabaseInUse", "DatabaseReadOnly",
    "DatabaseUnavailable", "ForkInSubSession", "ForkOutOfRange", "GreenroomError",
    "HostNotAllowed", "InvalidMessageId", "InvalidRequest", "InvalidWorkingDir",
    "MessageNotFound", "ModelContextOverflow", "ModelError", "ModelKeyMissing",
    "ModelRateLimited", "ModelStreamMalformed", "ModelSwitchingNotSupported", "ModelTimeout",
    "NeedsDecision", "NewerDatabase", "NoPendingRequest", "NodeFenced", "NotADatabase",
    "NotFound", "OAuthFlowNotFound", "OwnedElsewhere", "OwnerUnavailable", "PayloadTooLarge",
    "QueueFull", "RerunNotSupported", "RunNotFound", "ScheduleNotFound", "SessionBusy",
    "SessionExists",
    "SessionGone", "SessionNotFound", "SessionNotRunning", "ShuttingDown", "StoreError",
    "StructuredOutputMismatch", "TooManyConnections", "ToolCallLoop", "ToolCallNotFound",
    "Unauthorized", "UnstorableValue", "UnsupportedMediaType", "WaitTimedOut",
]
# fmt: on


class GreenroomError(Exception):
    """Base of every error greenroom reports to a client."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    default_message: ClassVar[str] = "internal error"
    # Seconds a client should wait before trying again (the Retry-After header); None: no header.
    retry_after: int | None = None

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)


class InvalidRequest(GreenroomError):
    """The request is malformed; ``path`` names the offending field (``$.messages[0].role``)."""

    status = 400
    code = "invalid_request"
    default_message = "invalid request"

    def __init__(self, message: str | None = None, *, path: str = "$") -> None:
        super().__init__(message)
        self.path = path


class InvalidMessageId(InvalidRequest):
    code = "invalid_message_id"
    default_message = "invalid message ID"


class ForkOutOfRange(InvalidRequest):
    code = "fork_out_of_range"
    default_message = "fork user-message index out of range"


class ForkInSubSession(InvalidRequest):
    code = "fork_in_sub_session"
    default_message = "fork user-message index falls inside a sub-session"


class InvalidWorkingDir(InvalidRequest):
    code = "invalid_working_dir"
    default_message = "invalid working directory"


class AgentConfigError(InvalidRequest):
    """An agent file failed to load; ``problems`` holds one ``file:line: path: what`` per fault."""

    code = "invalid_agent_config"
    default_message = "invalid agent file"

    def __init__(self, problems: list[str] | tuple[str, ...], *, path: str = "$") -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems) or None, path=path)


class AgentSwitchFailed(InvalidRequest):
    code = "agent_switch_failed"
    default_message = "switching agent failed"


class UnstorableValue(InvalidRequest):
    """A store could not encode a value (the edge should have refused it): that one write
    failed, nothing else did."""

    code = "unstorable_value"
    default_message = "a value cannot be stored"


class ConfigError(InvalidRequest):
    """A server start-up option is wrong; the message names it."""

    code = "config_error"
    default_message = "invalid server configuration"


class Unauthorized(GreenroomError):
    status = 401
    code = "unauthorized"
    default_message = "missing Authorization header"


class CrossSiteRequest(GreenroomError):
    """A browser request on another site's behalf: its ``Origin`` is not this server's."""

    status = 403
    code = "cross_site_request"
    default_message = "cross-site request refused"


class NotFound(GreenroomError):
    status = 404
    code = "not_found"
    default_message = "not found"


class SessionNotFound(NotFound):
    code = "session_not_found"
    default_message = "session not found"

    def __init__(self, session_id: str = "", message: str | None = None) -> None:
        super().__init__(message or (f"session not found: {session_id}" if session_id else None))
        self.session_id = session_id


class MessageNotFound(NotFound):
    code = "message_not_found"
    default_message = "message not found"


class AgentNotFound(NotFound):
    code = "agent_not_found"
    default_message = "agent source not found"


class ScheduleNotFound(NotFound):
    code = "schedule_not_found"
    default_message = "schedule not found"


class ToolCallNotFound(NotFound):
    code = "tool_call_not_found"
    default_message = "no tool call in doubt with that id"


class RunNotFound(NotFound):
    code = "run_not_found"
    default_message = "no run of this session with that id"


class OAuthFlowNotFound(NotFound):
    """No MCP OAuth flow waits for the ``state`` a callback names (finished, expired, unknown)."""

    code = "oauth_flow_not_found"
    default_message = "no pending OAuth flow for this state"


class SessionBusy(GreenroomError):
    status = 409
    code = "session_busy"
    default_message = "session is already processing a request"


class SessionNotRunning(GreenroomError):
    status = 409
    code = "session_not_running"
    default_message = "session not found or not running"


class NoPendingRequest(GreenroomError):
    status = 409
    code = "no_pending_request"
    default_message = "no request in progress"


class NeedsDecision(GreenroomError):
    """Tool calls of an interrupted turn are in doubt: a person decides each before a run."""

    status = 409
    code = "needs_decision"
    default_message = (
        "tool calls of an interrupted turn are in doubt; decide each one first "
        "(POST /api/sessions/{id}/recovery/decisions)"
    )


class AgentMismatch(GreenroomError):
    """A run names another agent file or agent than the session runs (decision 0019)."""

    status = 409
    code = "agent_mismatch"
    default_message = "this session runs another agent; start a new session for this one"


class PayloadTooLarge(GreenroomError):
    status = 413
    code = "payload_too_large"
    default_message = "request body too large"


class UnsupportedMediaType(GreenroomError):
    status = 415
    code = "unsupported_media_type"
    default_message = "request bodies must be JSON (Content-Type: application/json)"


class HostNotAllowed(GreenroomError):
    """The ``Host`` header names a host this server does not answer to (DNS rebinding)."""

    status = 421
    code = "host_not_allowed"
    default_message = "host not allowed"


class ModelSwitchingNotSupported(GreenroomError):
    status = 422
    code = "model_switching_not_supported"
    default_message = "model switching not supported by this runtime"


class RerunNotSupported(GreenroomError):
    status = 422
    code = "rerun_not_supported"
    default_message = "this session's runtime cannot run a tool call again"


class CompactionNotSupported(GreenroomError):
    status = 422
    code = "compaction_not_supported"
    default_message = "this session's runtime cannot compact its history"


class BudgetExceeded(GreenroomError):
    """A turn stopped before a model call that would take the session past its budget."""

    status = 402
    code = "budget_exceeded"
    default_message = "the session's cost budget is spent"


class ToolCallLoop(GreenroomError):
    """The model asked for the same tool call more often in a row than the agent allows."""

    status = 422
    code = "max_consecutive_tool_calls"
    default_message = "the model repeated the same tool call too many times in a row"


class QueueFull(GreenroomError):
    status = 429
    code = "queue_full"
    default_message = "queue full"
    retry_after = 1

    def __init__(self, message: str | None = None, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        if retry_after is not None:
            self.retry_after = retry_after


class TooManyConnections(QueueFull):
    code = "too_many_connections"
    default_message = "too many open connections from this client address"


class AgentSourceUnavailable(GreenroomError):
    status = 502
    code = "agent_source_unavailable"
    default_message = "agent source unavailable"


class ModelError(GreenroomError):
    """A model call failed; the turn ends with an ``error`` event carrying ``code``."""

    status = 502
    code = "model_error"
    default_message = "model call failed"


class ModelKeyMissing(ModelError):
    code = "missing_api_key"
    default_message = "the model's API key is not set"


class ModelRateLimited(ModelError):
    code = "rate_limited"
    default_message = "the model provider kept rate-limiting the request"


class ModelTimeout(ModelError):
    code = "model_timeout"
    default_message = "the model did not answer in time"


class ModelStreamMalformed(ModelError):
    code = "malformed_stream"
    default_message = "the model's stream was malformed or cut short"


class ModelContextOverflow(ModelError):
    """The provider refused the prompt as longer than the model's context window."""

    code = "context_exceeded"
    default_message = "the conversation exceeds the model's context window"


class StructuredOutputMismatch(ModelError):
    """The final answer is not JSON matching the agent's ``structured_output`` schema."""

    code = "structured_output_mismatch"
    default_message = "the model's answer does not match the structured output schema"


class SessionGone(GreenroomError):
    status = 503
    code = "session_gone"
    default_message = "session actor stopped before answering; retry"


class WaitTimedOut(GreenroomError):
    """What a request asked to wait for did not happen within its ``timeout`` / ``wait``."""

    status = 503
    code = "wait_timed_out"
    default_message = "timed out waiting"


class ShuttingDown(GreenroomError):
    status = 503
    code = "shutting_down"
    default_message = "server is shutting down"


class OwnedElsewhere(GreenroomError):
    """Another live node owns the session (several nodes on one PostgreSQL). The transport
    forwards the request to ``owner_url``; a forwarded request that still meets this answers 421."""

    status = 421
    code = "owned_elsewhere"
    default_message = "another node owns this session"

    def __init__(self, message: str | None = None, *, owner: str = "", owner_url: str = "") -> None:
        super().__init__(message)
        self.owner = owner
        self.owner_url = owner_url


class OwnerUnavailable(GreenroomError):
    """The session's owner does not answer and its lease has not expired yet: retry after it."""

    status = 503
    code = "owner_unavailable"
    default_message = "the node that owns this session does not answer; retry shortly"
    retry_after = 1  # or, raised by the forwarder, the seconds the owner's lease has left

    def __init__(self, message: str | None = None, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        if retry_after is not None:
            self.retry_after = retry_after


class NodeFenced(GreenroomError):
    """This node could not renew its lease in time and stopped its sessions; it rejoins."""

    status = 503
    code = "node_fenced"
    default_message = "this node lost its cluster lease and is rejoining; retry shortly"
    retry_after = 1


class StoreError(GreenroomError):
    code = "store_error"
    default_message = "session store error"


class SessionExists(StoreError):
    """A store was asked to add a session under an id it already holds (on PostgreSQL, a
    deleted session's id too: it is never used again). Its status and code are StoreError's."""

    default_message = "a session with this id already exists"


class DatabaseUnavailable(StoreError):
    """The database connection was lost or refused; nothing was written. Retry."""

    status = 503
    code = "database_unavailable"
    default_message = "the database is unavailable; retry shortly"
    retry_after = 1


class DatabaseError(StoreError):
    """Opening or migrating a database failed; the message names the file and what to do."""

    code = "database_error"


class NotADatabase(DatabaseError):
    code = "not_a_database"


class NewerDatabase(DatabaseError):
    code = "newer_database"


class DatabaseReadOnly(DatabaseError):
    code = "database_read_only"


class DatabaseInUse(DatabaseError):
    code = "database_in_use"
