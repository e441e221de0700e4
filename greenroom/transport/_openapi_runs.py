"""The OpenAPI schemas of run records (issue 25): a run, the runs list, the JSON answer of a
run asked with ``wait=true``, and the ``Greenroom-Run-Id`` header of every run."""

from __future__ import annotations

from ._schema import JSON

_TIME = {"type": ["string", "null"], "format": "date-time"}

DELIVERY: JSON = {
    "type": "object",
    "description": "The run's webhook delivery (status pending, delivered or failed)",
    "properties": {
        "url": {"type": "string"},
        "delivery_id": {"type": "string"},
        "status": {"type": "string", "enum": ["pending", "delivered", "failed", ""]},
        "attempts": {"type": "integer"},
        "last_error": {"type": "string"},
        "finished_at": _TIME,
    },
    "required": ["url", "status"],
}

RUN: JSON = {
    "type": "object",
    "description": "A run record: one turn, how it ended, when, and what it used",
    "properties": {
        "id": {"type": "string"},
        "session_id": {"type": "string"},
        "status": {
            "type": "string",
            "enum": ["running", "completed", "failed", "cancelled", "interrupted"],
        },
        "agent": {"type": "string", "description": "the agent source"},
        "agent_name": {"type": "string"},
        "model": {"type": "string"},
        "created_at": _TIME,
        "started_at": _TIME,
        "first_token_at": _TIME,
        "ended_at": _TIME,
        "input_tokens": {"type": "integer"},
        "output_tokens": {"type": "integer"},
        "cost": {"type": "number"},
        "error": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"message": {"type": "string"}, "code": {"type": "string"}},
                },
                {"type": "null"},
            ]
        },
        "reason": {"type": "string", "description": "why it was cancelled or interrupted"},
        "webhook": {"anyOf": [{"$ref": "#/components/schemas/WebhookDelivery"}, {"type": "null"}]},
    },
    "required": ["id", "session_id", "status", "created_at", "started_at"],
}

RUN_ID_HEADERS: JSON = {
    "Greenroom-Run-Id": {
        "description": "The run's id (GET /api/sessions/{session_id}/runs/{run_id})",
        "schema": {"type": "string"},
    }
}


def components(schemas: dict[str, JSON]) -> None:
    schemas.setdefault("Run", RUN)
    schemas.setdefault("WebhookDelivery", DELIVERY)


def run_ref() -> JSON:
    return {"$ref": "#/components/schemas/Run"}


def wait_answer() -> JSON:
    """The JSON answer of a run asked with wait=true (or Accept: application/json)."""
    return {
        "schema": {
            "type": "object",
            "properties": {
                "run": run_ref(),
                "message": {
                    "description": "The run's last assistant message (null: none)",
                    "anyOf": [{"type": "object"}, {"type": "null"}],
                },
            },
            "required": ["run", "message"],
        }
    }


def success_schema(name: str) -> JSON | None:
    if name == "list_runs":
        return {
            "type": "object",
            "properties": {"runs": {"type": "array", "items": run_ref()}},
            "required": ["runs"],
        }
    if name == "get_run":
        return run_ref()
    return None
