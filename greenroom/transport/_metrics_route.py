"""``GET /metrics``: the server's Prometheus metrics, the count of every HTTP request by route
template, and the gauges of what is alive, read from the registry at each scrape.

Who may scrape (docs/security.md): anyone the server lets in when it has no token (loopback by
default); else a bearer token, the server's ``--auth-token`` or ``--metrics-token``.
"""

from __future__ import annotations

import re

from quart import Response, request
from quart_trio import QuartTrio

from greenroom.actors import StreamState
from greenroom.errors import GreenroomError, Unauthorized
from greenroom.observe import LiveCounts

from ._context import Context
from ._cross_site import check_bearer
from ._errors import map_error
from ._json import dumps

METRICS_PATH = "/metrics"
UNMATCHED = "unmatched"  # no route: the raw path is never a label


def check_metrics_token(header: str, tokens: tuple[str, ...]) -> None:
    """Raise Unauthorized unless ``header`` carries one of ``tokens`` (none: open)."""
    tokens = tuple(t for t in tokens if t)
    if not tokens:
        return
    refused: Unauthorized | None = None
    for token in tokens:
        try:
            check_bearer(header, token)
            return
        except Unauthorized as exc:
            refused = exc
    assert refused is not None
    raise refused


def live_counts(ctx: Context) -> LiveCounts:
    """What is alive on this server now (read synchronously, at scrape time)."""
    registry = ctx.registry
    ids = registry.live_ids()
    running = building = follow_ups = 0
    for session_id in ids:
        stats = registry.statistics(session_id)
        running += stats.state is StreamState.RUNNING
        building += stats.building
        follow_ups += stats.queued_follow_ups
    # Every log's subscribers, a live actor's or not, and a cluster node's mirrors' (clients
    # following here a session another node owns).
    subscribers = registry.logs.total_subscribers()
    if ctx.mirrors is not None:
        subscribers += ctx.mirrors.total_subscribers()
    membership = registry.persistence.membership
    cluster = membership is not None
    return LiveCounts(
        actors=len(ids),
        running_turns=running,
        building=building,
        subscribers=subscribers,
        queued_follow_ups=follow_ups,
        cluster=cluster,
        lease_held=cluster and not registry.fenced,
        owned_sessions=len(ids) if cluster else 0,
        node=membership.node_id if membership is not None else "",
    )


def route_template(rule: str | None) -> str:
    """``/api/sessions/<session_id>`` as the API names it, ``/api/sessions/{session_id}``."""
    if rule is None:
        return UNMATCHED
    return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule)


def register_metrics(app: QuartTrio, ctx: Context) -> None:
    """``GET /metrics`` and the HTTP request counter, into ``ctx.metrics``."""
    metrics = ctx.metrics
    metrics.watch(lambda: live_counts(ctx))
    tokens = (ctx.config.auth_token, ctx.config.metrics_token)

    @app.get(METRICS_PATH)
    async def metrics_endpoint() -> Response:
        try:
            check_metrics_token(request.headers.get("Authorization", ""), tokens)
        except GreenroomError as exc:
            status, body, headers = map_error(exc)
            return Response(dumps(body), status, headers, content_type="application/json")
        text, content_type = metrics.render()
        return Response(text, 200, content_type=content_type)

    @app.after_request
    async def count_request(response: Response) -> Response:
        rule = request.url_rule.rule if request.url_rule is not None else None
        operation = route_template(rule)
        metrics.http_requests.labels(operation, request.method, str(response.status_code)).inc()
        return response


__all__ = ["METRICS_PATH", "check_metrics_token", "live_counts", "register_metrics"]
