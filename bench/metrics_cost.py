"""What metrics cost per token (issue 24): run by hand.

    .venv/bin/python bench/metrics_cost.py [--sessions 10] [--turns 5] [--tokens 200]
                                           [--store sqlite|memory]

An in-process server (greenroom.testing: the real agent loop, event log and HTTP edge, a SQLite
file as ``greenroom serve`` has by default, or the memory store, which counts every event it
takes on its own) plays ``--turns`` turns of ``--tokens`` text tokens on ``--sessions``
sessions at once, each followed on its ``/events`` subscription, under cProfile. The time
cProfile gives the functions of ``prometheus_client`` and ``greenroom/observe/_metrics.py``
(every metric update and its call-site helpers) is divided by the token events: the metrics'
CPU per token, an upper bound (profiling makes every small call dearer). Compare it with the
server CPU per token of ``bench/side_by_side.py --scenarios x10`` (a separate server process).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import trio

from greenroom.testing import ScriptedAgent, StoreKind, open_greenroom

METRICS_FILES = ("prometheus_client", "greenroom/observe/_metrics.py")


async def play(sessions: int, turns: int, tokens: int, store: StoreKind) -> int:
    agent = ScriptedAgent(turns=[[{"text": ["tok "] * tokens}]], loop=True)
    delivered = 0
    async with open_greenroom(agent, store=store) as gr:

        async def one() -> None:
            nonlocal delivered
            sid = (await gr.client.create_session(title="bench"))["id"]
            async with gr.client.events(sid, 0) as events:
                for _ in range(turns):
                    await gr.client.run(sid, "go")
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
    args = parser.parse_args()
    profile = cProfile.Profile(time.process_time)
    start = time.process_time()
    profile.enable()
    tokens = trio.run(play, args.sessions, args.turns, args.tokens, args.store)
    profile.disable()
    cpu = time.process_time() - start
    stats = pstats.Stats(profile)
    in_metrics = 0.0
    calls = 0
    for (filename, _, _), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if any(part in filename for part in METRICS_FILES):
            in_metrics += tottime
            calls += ncalls
    print(f"token events: {tokens} ({args.store})")
    print(f"process CPU (server and client, profiled): {cpu / tokens * 1e6:.1f} us per token")
    print(f"metrics CPU (profiled): {in_metrics / tokens * 1e6:.2f} us per token,")
    print(f"  {calls / tokens:.2f} calls per token, {in_metrics / cpu:.2%} of the process")


if __name__ == "__main__":
    main()
