"""Why memory grew by ~600 KB per model call before the clients were pooled: run by hand.

    .venv/bin/python bench/sdk_clients_memory.py [N]

Builds N ``openai.AsyncOpenAI`` clients one after the other the way every model call used to
(``async with``, touching ``client.chat.completions`` as a call does), under the garbage
collector settings of ``greenroom serve`` (``gc.freeze()``, thresholds 20,000/20/20). A closed
client stays alive in a reference cycle (``client.chat.completions`` refers back to the client)
with its httpx2 client and SSL context until a full collection, so the process grows by the
size of an SSL context (its CA store, in OpenSSL's memory, invisible to tracemalloc) per call.
Nothing is sent: the base URL is never contacted.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import openai
import trio


def rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def main(count: int) -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)  # what serve's tune_gc sets
    contexts = []
    before = rss_kb()
    for _ in range(count):
        async with openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0
        ) as client:
            _ = client.chat.completions  # what a call touches: the resource refers back
            transport: Any = client._client._transport
            contexts.append(weakref.ref(transport._pool._ssl_context))
    alive = sum(ref() is not None for ref in contexts)
    grown = rss_kb() - before
    print(f"{count} closed clients: {alive} SSL contexts still alive, RSS +{grown} KB")
    gc.collect()
    alive = sum(ref() is not None for ref in contexts)
    print(f"after a full collection: {alive} alive (RSS stays at its high-water mark)")


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 100)
