"""The OpenAPI document: valid 3.1, complete, and honoured by the live server (schemathesis).

The auth check talks to a real ``greenroom serve`` subprocess on 127.0.0.1:0 (real clock); the
full schemathesis run (all phases and checks) is tests/fuzz/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate

from greenroom.transport import OPERATIONS, create_app
from greenroom.transport._openapi import build_openapi  # white-box: the document on its own
from tests.fuzz.run import TOKEN, live_server


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


@pytest.mark.parametrize("secured", [True, False])
def test_document_is_valid_openapi_31(secured: bool) -> None:
    document = build_openapi(secured=secured)
    assert document["openapi"] == "3.1.0"
    validate(document)
    schemas = document["components"]["schemas"]
    for ref in set(refs(document)):
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in schemas


def test_every_operation_and_route_is_documented() -> None:
    document = build_openapi()
    for op in OPERATIONS:
        if op.rest:
            assert op.method.lower() in document["paths"][op.path], op.name

    class NoAgents:
        def list_agents(self) -> list[dict[str, Any]]:
            return []

        def agent_config(self, source: str) -> dict[str, Any]:
            return {}

        async def tool_count(self, source: str, agent_name: str) -> int:
            return 0

        def check_agent(self, source: str, agent_name: str) -> None:
            pass

    app = create_app(registry=None, agents=NoAgents())  # type: ignore[arg-type]
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        assert path in document["paths"], path
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            if not rule.websocket:
                assert method.lower() in document["paths"][path], (method, path)


def test_error_shape_and_event_union_are_documented() -> None:
    document = build_openapi()
    schemas = document["components"]["schemas"]
    assert schemas["Error"]["required"] == ["message", "code"]
    event = schemas["Event"]
    tags = event["x-discriminator"]["mapping"]
    for tag in ("agent_choice", "tool_call", "session_title", "session_exited", "gap"):
        assert tag in tags
    assert {"$ref": "#/components/schemas/OtherEvent"} in event["anyOf"]
    steer = document["paths"]["/api/sessions/{session_id}/steer"]["post"]["responses"]
    assert "Retry-After" in steer["429"]["headers"]
    assert "401" in steer and "413" in steer


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with live_server() as url:
        yield url


# Operations that wait on purpose (up to 5 minutes) or stream until the client leaves are
# exercised by their own tests.
NOT_FUZZED = {"wait_ready", "status", "delete", "events", "run", "run_agent", "websocket"}
FUZZED = [
    (path, method)
    for path, methods in build_openapi()["paths"].items()
    for method, operation in methods.items()
    if operation["operationId"] not in NOT_FUZZED
]


@pytest.fixture(scope="module")
def api_schema(server_url: str) -> Any:
    return schemathesis.openapi.from_url(
        f"{server_url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}
    )


@pytest.mark.parametrize(("path", "method"), FUZZED)
def test_auth_is_enforced(api_schema: Any, path: str, method: str) -> None:
    operation = api_schema[path][method.upper()]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=1,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call(headers={"Authorization": "Bearer wrong"}, timeout=10)
        # the page asks for a token; the OAuth landing's state is its credential
        public = path in ("/health", "/ready", "/", "/ui/{name}", "/mcp-oauth/callback")
        assert (response.status_code == 401) != public, (path, response.status_code)

    check()
