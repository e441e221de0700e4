"""What metrics and spans cost per token (issue 24): run by hand.

    .venv/bin/python bench/metrics_cost.py [--sessions 10] [--turns 5] [--tokens 200]
                                           [--store sqlite|memory] [--tracing]

An in-process server (greenroom.testing: the real agent loop, event log and HTTP edge, a SQLite
file as ``greenroom serve`` has by default, or the memory store, which counts every event it
takes on its own) plays ``--turns`` turns of ``--tokens`` text tokens on ``--sessions``
sessions at once, each followed on its ``/events`` subscription, under cProfile. The time
cProfile gives the functions of ``prometheus_client`` and ``greenroom/observe/_metrics.py``
(every metric update and its call-site helpers) is divided by the token events: the metrics'
CPU per token, an upper bound (profiling makes every small call dearer). Compare it with the
server CPU per token of ``bench/side_by_side.py --scenarios x10`` (a separate server process).

``--tracing`` turns traces on first (the OpenTelemetry SDK, a ``BatchSpanProcessor`` in front of
an exporter that drops the spans, as ``bench/_traced_serve.py``) and reports the same for the
tracing code: ``opentelemetry`` and ``greenroom/observe/_tracing.py``, ``_spans.py``,
``_propagation.py`` (span creation, attributes, context, the processor's queue and its worker
thread's batching; not OTLP encoding), with the spans made per turn by name.

``--ab N`` measures instead, unprofiled, N pairs of whole runs in this one process with tracing
on and off alternately (the order flipped every pair): process CPU per token of each, and the
difference, which is what tracing costs (server and client share the process, so only the
difference means something), plus the unprofiled cost of one span.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Sequence
from typing import Any

import trio

from greenroom.client import ApiError
from greenroom.testing import ScriptedAgent, StoreKind, open_greenroom

METRICS_FILES = ("prometheus_client", "greenroom/observe/_metrics.py")
TRACING_FILES = (
    "opentelemetry",
    "greenroom/observe/_tracing.py",
    "greenroom/observe/_spans.py",
    "greenroom/observe/_propagation.py",
)


class _Counted:
    """Span names the exporter saw (filled by :func:`trace`)."""

    names: dict[str, int] = {}


def trace() -> Any:
    """Tracing on, spans dropped at export; returns the provider (to flush at the end)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from greenroom.observe import install_provider

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            for one in spans:
                name = one.name.split(" ")[0] if one.name.startswith("chat") else one.name
                _Counted.names[name] = _Counted.names.get(name, 0) + 1
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    install_provider(provider)
    return provider


async def play(sessions: int, turns: int, tokens: int, store: StoreKind) -> int:
    agent = ScriptedAgent(turns=[[{"text": ["tok "] * tokens}]], loop=True)
    delivered = 0
    async with open_greenroom(agent, store=store) as gr:

        async def one() -> None:
            nonlocal delivered
            sid = (await gr.client.create_session(title="bench"))["id"]
            async with gr.client.events(sid, 0) as events:
                for _ in range(turns):
                    while True:
                        try:
                            await gr.client.run(sid, "go")
                            break
                        except ApiError as exc:  # the last turn's end not settled yet
                            if exc.status != 409:
                                raise
                            await trio.sleep(0.001)
                    seen = await events.until("stream_stopped")
                    delivered += sum(1 for e in seen if e.type == "agent_choice")

        async with trio.open_nursery() as nursery:
            for _ in range(sessions):
                nursery.start_soon(one)
    return delivered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--tracing", action="store_true", help="traces on (spans dropped)")
    parser.add_argument("--ab", type=int, default=0, help="N pairs, tracing on/off, unprofiled")
    args = parser.parse_args()
    if args.ab:
        ab(args)
        return
    provider = trace() if args.tracing else None
    profile = cProfile.Profile(time.process_time)
    start = time.process_time()
    profile.enable()
    tokens = trio.run(play, args.sessions, args.turns, args.tokens, args.store)
    if provider is not None:
        provider.force_flush(5000)  # the worker thread's batching is in the profile too
    profile.disable()
    cpu = time.process_time() - start
    stats = pstats.Stats(profile)
    print(f"token events: {tokens} ({args.store})")
    print(f"process CPU (server and client, profiled): {cpu / tokens * 1e6:.1f} us per token")
    parts = [("metrics", METRICS_FILES)] + ([("tracing", TRACING_FILES)] if args.tracing else [])
    for label, files in parts:
        spent = 0.0
        calls = 0
        for (filename, _, _), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
            if any(part in filename for part in files):
                spent += tottime
                calls += ncalls
        print(f"{label} CPU (profiled): {spent / tokens * 1e6:.2f} us per token,")
        print(f"  {calls / tokens:.2f} calls per token, {spent / cpu:.2%} of the process")
    if provider is not None:
        turns = args.sessions * args.turns
        total = sum(_Counted.names.values())
        print(f"spans: {total} ({total / turns:.1f} per turn, {total / tokens:.3f} per token)")
        for name, count in sorted(_Counted.names.items(), key=lambda item: -item[1]):
            print(f"  {name}: {count / turns:.2f} per turn")
        provider.shutdown()


def ab(args: argparse.Namespace) -> None:
    import statistics

    from greenroom.observe import span
    from greenroom.observe._tracing import _state  # white-box: switch tracing per run

    provider = trace()
    tracer = _state.tracer
    per: dict[bool, list[float]] = {True: [], False: []}
    for pair in range(args.ab):
        for on in (True, False) if pair % 2 else (False, True):
            _state.tracer = tracer if on else None
            start = time.process_time()
            tokens = trio.run(play, args.sessions, args.turns, args.tokens, args.store)
            if on:
                provider.force_flush(5000)  # this run's spans batched and exported
            per[on].append((time.process_time() - start) / tokens * 1e6)
    _state.tracer = tracer
    attributes = {"greenroom.store": "/tmp/x.sqlite3", "gen_ai.tool.name": "shell"}
    rounds = 20_000
    start = time.process_time()
    for _ in range(rounds):
        with span("store write", attributes):
            pass
    provider.force_flush(5000)
    one_span = (time.process_time() - start) / rounds * 1e6
    _state.tracer = None
    start = time.process_time()
    for _ in range(rounds):
        with span("store write", attributes):
            pass
    noop = (time.process_time() - start) / rounds * 1e6
    off_cpu, on_cpu = statistics.median(per[False]), statistics.median(per[True])
    diffs = [b - a for a, b in zip(per[False], per[True], strict=True)]
    print(
        f"{args.ab} pairs of {args.sessions} sessions x {args.turns} turns x {args.tokens} tokens"
    )
    print(f"process CPU per token, tracing off: median {off_cpu:.1f} us {sorted(per[False])}")
    print(f"process CPU per token, tracing on:  median {on_cpu:.1f} us {sorted(per[True])}")
    print(f"on - off per pair: median {statistics.median(diffs):.1f} us per token")
    print(
        f"one span (2 attributes, batch processor, dropped): {one_span:.1f} us; off: {noop:.2f} us"
    )
    provider.shutdown()


if __name__ == "__main__":
    main()
