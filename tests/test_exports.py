"""The façades' public names, pinned: each package listed in EXPORTS exports exactly the names
given there (its ``__all__`` when it has one, else every public attribute that is not a
module), and every one of them resolves. trio (``src/trio/_tests/test_exports.py``) and httpx
(``tests/test_exported_members.py``) pin theirs the same way.

To pin another package, add it to EXPORTS with its names.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

EXPORTS: dict[str, set[str]] = {
    "greenroom.actors": {
        "DEFAULT_SUBSCRIBER_BUFFER",
        "DecisionOutcome",
        "DisconnectPolicy",
        "EventLog",
        "EventLogs",
        "EventSource",
        "FollowUpInjector",
        "FollowUpResult",
        "IDLE_RING",
        "LogEntry",
        "QueueDepth",
        "Readiness",
        "RecoveryReport",
        "Registry",
        "RegistryConfig",
        "RemoteFire",
        "RunFacts",
        "RunStream",
        "ScheduleSpec",
        "Scheduler",
        "SessionHandle",
        "SessionSnapshot",
        "SessionStatistics",
        "SessionStatus",
        "StreamGuard",
        "StoreProcessLedger",
        "StreamState",
        "Subscription",
        "apply_agent_switch_commands",
        "host_id",
        "kill_leftover_groups",
        "open_registry",
        "plan_recovery",
        "recover",
        "recover_session",
        "answer_json",
        "run_json",
    },
    "greenroom.client": {
        "ApiError",
        "ClientError",
        "ConnectionState",
        "Event",
        "EventStream",
        "GreenroomClient",
        "Unreachable",
    },
    "greenroom.domain": {
        "AgentChoice",
        "AgentChoiceReasoning",
        "AgentInfo",
        "AgentSwitching",
        "Amount",
        "Approval",
        "AuthorizationEvent",
        "ChatMessage",
        "Count",
        "CostAmount",
        "TokenCount",
        "MAX_COST",
        "MAX_TOKEN_COUNT",
        "add_cost",
        "add_count",
        "DELTA_TYPES",
        "EVENT_TAGS",
        "ElicitationRequest",
        "ErrorEvent",
        "ErrorItem",
        "Event",
        "FunctionCall",
        "Gap",
        "INT64_MAX",
        "INT64_MIN",
        "ImageURL",
        "Item",
        "Length",
        "MARKER",
        "MAX_NAME",
        "MAX_PATH",
        "MAX_TITLE",
        "MaxIterationsReached",
        "McpInitFinished",
        "McpInitStarted",
        "MessageUsage",
        "Message",
        "MessagePart",
        "Name",
        "NonBlank",
        "PathText",
        "Pattern",
        "Permissions",
        "PlainName",
        "ROLES",
        "Range",
        "RawEvent",
        "Role",
        "Session",
        "SessionExited",
        "SessionCompaction",
        "SessionSummary",
        "SessionSummaryEvent",
        "DEFAULT_LIMIT",
        "MAX_LIMIT",
        "MAX_QUERY",
        "PageKey",
        "SessionOrder",
        "SessionPage",
        "SessionQuery",
        "query_words",
        "search_words",
        "SessionTitle",
        "StreamStarted",
        "StreamStopped",
        "SubSession",
        "SubSessionCompleted",
        "Summary",
        "Title",
        "TokenUsage",
        "TokenUsageInfo",
        "ToolCall",
        "ToolCallConfirmation",
        "ToolCallDecided",
        "HookBlocked",
        "ToolCallEvent",
        "ToolCallInDoubt",
        "ToolCallResponse",
        "ToolsetInfo",
        "TurnInterrupted",
        "Usage",
        "UserMessage",
        "WIRE_HIDDEN",
        "WIRE_RENAMES",
        "Warning",
        "all_errors",
        "batch_export",
        "branch",
        "cap_tool_result",
        "check_text",
        "check_value",
        "converter",
        "count_user_messages",
        "encode_event",
        "encode_json",
        "estimate_tokens",
        "event_from_json",
        "event_to_json",
        "event_type",
        "format_datetime",
        "frozen_map",
        "item_from_json",
        "item_to_json",
        "known_keys_only",
        "new_id",
        "next_fork_title",
        "parse",
        "parse_datetime",
        "parse_lenient",
        "recovery_export",
        "to_json",
        "token_totals",
        "truncate_middle",
        "user_message_index",
        "utcnow",
        "visible_messages",
        "WebhookPrefix",
        "check_webhook",
        "parse_webhook_allow",
    },
    "greenroom.transport": {
        "AgentCatalog",
        "AppConfig",
        "ClientLimits",
        "Context",
        "Forwarder",
        "HOP_HEADER",
        "MCP_OAUTH_LANDING",
        "OPERATIONS",
        "Operation",
        "ShieldedSend",
        "check_bearer",
        "create_app",
        "scheduled_forward",
    },
}


def public_attributes(module: ModuleType) -> set[str]:
    """The module's public attributes, leaving out submodules and the ``annotations`` feature
    that ``from __future__ import annotations`` leaves behind."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and type(value).__module__ != "__future__"
    }


def exported(module: ModuleType) -> set[str]:
    names = getattr(module, "__all__", None)
    return set(names) if names is not None else public_attributes(module)


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_the_package_exports_exactly_its_names(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(exported(module) - EXPORTS[package]) == [], "exported, not pinned here"
    assert sorted(EXPORTS[package] - exported(module)) == [], "pinned here, not exported"


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert [name for name in sorted(exported(module)) if not hasattr(module, name)] == []


@pytest.mark.parametrize(
    "package", sorted(p for p in EXPORTS if hasattr(importlib.import_module(p), "__all__"))
)
def test_a_package_with_all_has_no_other_public_name(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(public_attributes(module) - set(module.__all__)) == []
