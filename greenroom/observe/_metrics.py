"""Prometheus metrics: one registry per server, every metric greenroom records, and labels
that cannot grow without bound.

A server makes a :class:`Metrics` and makes it current (:func:`use_metrics`) before it opens
anything, so every task it starts (trio copies the context into each new task) records into its
own registry: several servers in one process (tests, ``greenroom chat``) keep apart counts. Code
outside a server records into a fallback that nothing exposes.

Call sites stay one line: ``metrics().turns.labels(agent, outcome).inc()``. A label whose values
come from outside (agent, model and tool names, error codes) is *capped*: past ``cap`` distinct
values every new one is counted as ``other``, so a hostile client or model cannot blow up the
number of series. Session ids are never labels.

What is alive (actors, running turns, subscribers, MCP servers, a cluster lease) is not kept
in step by hand: a :class:`LiveCollector` asks the server for a :class:`LiveCounts` at each
scrape.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import attrs
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# No ``*_created`` series beside every counter and histogram: they double what a scrape
# carries and no dashboard of ours reads them (a process-wide switch of the library).
disable_created_metrics()  # type: ignore[no-untyped-call]

OTHER = "other"
"""The value a capped label takes once it has seen ``cap`` distinct values."""

DEFAULT_CAP = 64
"""Distinct values a capped label keeps (agent, model, tool, error code names)."""

M = TypeVar("M", Counter, Histogram)

# Seconds: from a fast tool or store commit to a long turn.
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
_BATCH = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)


class Capped(Generic[M]):
    """A labelled metric whose capped labels fold new values into ``other`` past their cap."""

    def __init__(self, metric: M, capped: Sequence[int], cap: int) -> None:
        self.metric: M = metric
        self._capped = tuple(capped)  # positions of the labels that are capped
        self._cap = cap
        self._seen: dict[int, set[str]] = {i: set() for i in self._capped}
        self._lock = threading.Lock()  # the store's writer thread records too

    def labels(self, *values: str) -> M:
        if self._capped:
            folded = list(values)
            for i in self._capped:
                folded[i] = self._fold(i, str(values[i]))
            values = tuple(folded)
        return self.metric.labels(*values)

    def _fold(self, i: int, value: str) -> str:
        seen = self._seen[i]
        if value in seen:
            return value
        with self._lock:
            if len(seen) < self._cap:
                seen.add(value)
                return value
        return OTHER


@attrs.frozen
class LiveCounts:
    """What is alive on a server at one moment, read at scrape time."""

    actors: int = 0
    running_turns: int = 0
    building: int = 0  # sessions whose runtime is being built
    subscribers: int = 0
    queued_follow_ups: int = 0
    cluster: bool = False
    lease_held: bool = False
    owned_sessions: int = 0
    node: str = ""  # a cluster node's id ("" on a single node)


class LiveCollector(Collector):
    """Gauges of what is alive, from ``read`` at each scrape (nothing kept in step by hand)."""

    def __init__(self, read: Callable[[], LiveCounts], mcp: weakref.WeakSet[Any]) -> None:
        self._read = read
        self._mcp = mcp

    def describe(self) -> list[Metric]:
        return []  # collected lazily: the registry must not call read() at registration

    def collect(self) -> Iterator[Metric]:
        counts = self._read()
        info = GaugeMetricFamily(
            "greenroom_node_info", "Always 1; the node label names this server", labels=["node"]
        )
        info.add_metric([counts.node], 1)
        yield info
        for name, text, value in (
            ("greenroom_live_actors", "Session actors alive on this server", counts.actors),
            ("greenroom_running_turns", "Turns running now", counts.running_turns),
            ("greenroom_building_runtimes", "Sessions building a runtime now", counts.building),
            (
                "greenroom_subscribers",
                "Event-log subscribers (/events, WebSocket)",
                counts.subscribers,
            ),
            ("greenroom_queued_follow_ups", "Follow-up messages queued", counts.queued_follow_ups),
        ):
            yield GaugeMetricFamily(name, text, value=value)
        mcp = GaugeMetricFamily(
            "greenroom_mcp_servers", "MCP server connections by state", labels=["state"]
        )
        states = [getattr(server, "state", "") for server in list(self._mcp)]
        mcp.add_metric(["up"], sum(1 for s in states if s == "ready"))
        mcp.add_metric(["down"], sum(1 for s in states if s == "failed"))
        yield mcp
        if counts.cluster:
            yield GaugeMetricFamily(
                "greenroom_cluster_lease_held",
                "1 while this node holds its cluster lease, 0 while fenced",
                value=1 if counts.lease_held else 0,
            )
            yield GaugeMetricFamily(
                "greenroom_cluster_owned_sessions",
                "Sessions this node owns (live actors) in the cluster",
                value=counts.owned_sessions,
            )


class Metrics:
    """One server's registry and every metric it records (docs/observability.md lists them)."""

    def __init__(self, *, cap: int = DEFAULT_CAP) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.cap = cap
        r = self.registry

        def counter(
            name: str, text: str, labels: Sequence[str] = (), capped: Sequence[int] = ()
        ) -> Capped[Counter]:
            return Capped(Counter(name, text, labels, registry=r), capped, cap)

        def histogram(
            name: str,
            text: str,
            labels: Sequence[str],
            buckets: Sequence[float],
            capped: Sequence[int] = (),
        ) -> Capped[Histogram]:
            return Capped(Histogram(name, text, labels, registry=r, buckets=buckets), capped, cap)

        self.turns = counter(
            "greenroom_turns", "Turns ended, by agent and outcome", ("agent", "outcome"), (0,)
        )
        self.model_calls = counter(
            "greenroom_model_calls",
            "Model calls, by provider, model and outcome (ok, error)",
            ("provider", "model", "outcome"),
            (0, 1),
        )
        self.tokens = counter(
            "greenroom_model_tokens",
            "Tokens of model calls, by provider, model and direction (input, output)",
            ("provider", "model", "direction"),
            (0, 1),
        )
        self.cost = counter(
            "greenroom_model_cost_usd",
            "Priced cost of model calls in USD, by provider and model",
            ("provider", "model"),
            (0, 1),
        )
        self.tool_calls = counter(
            "greenroom_tool_calls",
            "Tool calls, by tool and outcome (ok, error, denied, rejected, blocked, unknown, "
            "in_doubt)",
            ("tool", "outcome"),
            (0,),
        )
        self.approvals = counter(
            "greenroom_approvals",
            "Answers to tool-call confirmations, by decision",
            ("decision",),
            (0,),
        )
        self.compactions = counter(
            "greenroom_compactions", "Compactions of a session's history, by outcome", ("outcome",)
        )
        self.errors = counter(
            "greenroom_errors", "Errors answered or reported, by machine code", ("code",), (0,)
        )
        self.http_requests = counter(
            "greenroom_http_requests",
            "HTTP requests, by route template, method and status",
            ("operation", "method", "status"),
            (1, 2),  # route templates are a closed set; methods and statuses are capped
        )
        self.ws_frames = counter(
            "greenroom_websocket_frames", "WebSocket frames, by direction (in, out)", ("direction",)
        )
        self.webhook_attempts = counter(
            "greenroom_webhook_attempts",
            "Webhook delivery attempts, by what followed (delivered, retry, failed)",
            ("outcome",),
        )
        self.events_written = Counter(
            "greenroom_events_written", "Session events committed to the store", registry=r
        )
        self.turn_seconds = histogram(
            "greenroom_turn_duration_seconds", "Turn duration, by agent", ("agent",), _SLOW, (0,)
        )
        self.first_token_seconds = histogram(
            "greenroom_model_time_to_first_token_seconds",
            "From a model call's start to its first streamed token",
            ("provider", "model"),
            _SLOW,
            (0, 1),
        )
        self.model_seconds = histogram(
            "greenroom_model_call_duration_seconds",
            "Model call latency, to the end of its stream",
            ("provider", "model"),
            _SLOW,
            (0, 1),
        )
        self.tool_seconds = histogram(
            "greenroom_tool_duration_seconds",
            "Tool run time, by tool",
            ("tool",),
            _FAST + _SLOW[7:],
            (0,),
        )
        self.commit_seconds = Histogram(
            "greenroom_store_commit_seconds",
            "Store transaction (group commit) latency",
            registry=r,
            buckets=_FAST,
        )
        self.commit_batch = Histogram(
            "greenroom_store_commit_batch_size",
            "Jobs and event rows per store commit",
            registry=r,
            buckets=_BATCH,
        )
        self.delivery_lag_seconds = Histogram(
            "greenroom_event_delivery_lag_seconds",
            "From the append of a commit's oldest event to the commit (subscribers may have it)",
            registry=r,
            buckets=_FAST,
        )
        # MCP server connections alive (``metrics().mcp_servers.add(server)``): each has a
        # ``state``; "ready" counts as up, "failed" as down, at scrape time.
        self.mcp_servers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._collector: LiveCollector | None = None

    def turn_ended(self, agent: str, outcome: str, seconds: float) -> None:
        """A turn ended: ``done``, ``failed`` or ``cancelled``."""
        self.turns.labels(agent or "default", outcome).inc()
        self.turn_seconds.labels(agent or "default").observe(seconds)

    def tool_ended(self, tool: str, outcome: str, seconds: float | None = None) -> None:
        """A tool call ended (or never ran: ``denied``, ``rejected``, ...)."""
        self.tool_calls.labels(tool, outcome).inc()
        if seconds is not None:
            self.tool_seconds.labels(tool).observe(seconds)

    def watch(self, read: Callable[[], LiveCounts]) -> None:
        """Collect the gauges of what is alive from ``read`` at each scrape (once a server)."""
        if self._collector is not None:
            self.registry.unregister(self._collector)
        self._collector = LiveCollector(read, self.mcp_servers)
        self.registry.register(self._collector)

    def render(self) -> tuple[bytes, str]:
        """The registry in Prometheus text format, and its content type."""
        from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class ModelCall:
    """One model call: ``with model_call(provider, model) as call:`` counts it (``ok``,
    ``error`` on an exception, ``cancelled``) and times it; ``call.first_token()`` at each
    delta times the first; ``call.usage(...)`` counts tokens and cost."""

    def __init__(self, metrics: Metrics, provider: str, model: str) -> None:
        self._metrics = metrics
        self.provider, self.model = provider, model
        self._start = time.monotonic()
        self._first = False

    def __enter__(self) -> ModelCall:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            outcome = "ok"
        elif issubclass(kind, Exception):
            outcome = "error"
        else:
            outcome = "cancelled"
        m, p, n = self._metrics, self.provider, self.model
        m.model_calls.labels(p, n, outcome).inc()
        m.model_seconds.labels(p, n).observe(time.monotonic() - self._start)

    def first_token(self) -> None:
        """A token arrived: the first one records the time to it."""
        if not self._first:
            self._first = True
            elapsed = time.monotonic() - self._start
            self._metrics.first_token_seconds.labels(self.provider, self.model).observe(elapsed)

    def usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        """What the call used (tokens and its priced cost)."""
        m, p, n = self._metrics, self.provider, self.model
        if input_tokens:
            m.tokens.labels(p, n, "input").inc(input_tokens)
        if output_tokens:
            m.tokens.labels(p, n, "output").inc(output_tokens)
        if cost > 0:
            m.cost.labels(p, n).inc(cost)


_FALLBACK = Metrics()
_CURRENT: contextvars.ContextVar[Metrics] = contextvars.ContextVar(
    "greenroom_metrics", default=_FALLBACK
)


def metrics() -> Metrics:
    """The current server's metrics (a fallback nothing exposes, outside a server)."""
    return _CURRENT.get()


def use_metrics(value: Metrics) -> contextvars.Token[Metrics]:
    """Make ``value`` current in this task and the tasks it starts from now on."""
    return _CURRENT.set(value)


def reset_metrics(token: contextvars.Token[Metrics]) -> None:
    """Undo :func:`use_metrics` (a server that stopped)."""
    _CURRENT.reset(token)


@contextlib.contextmanager
def metrics_scope() -> Iterator[Metrics]:
    """A fresh :class:`Metrics`, current inside the block (a server's, or a test harness')."""
    fresh = Metrics()
    token = use_metrics(fresh)
    try:
        yield fresh
    finally:
        reset_metrics(token)


def model_call(provider: str, model: str) -> ModelCall:
    """Start timing a model call into the current metrics."""
    return ModelCall(metrics(), provider, model)


__all__ = [
    "OTHER",
    "Capped",
    "LiveCollector",
    "LiveCounts",
    "Metrics",
    "ModelCall",
    "metrics",
    "metrics_scope",
    "model_call",
    "reset_metrics",
    "use_metrics",
]
