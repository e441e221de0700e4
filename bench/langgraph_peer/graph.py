"""The LangGraph peer of the benchmark: a one-node graph that calls ChatOpenAI once.

Served by ``langgraph dev`` (installed by ``make bench-peers`` into its own venv, never a
greenroom dependency). The model is the benchmark's fake OpenAI-compatible server, named by
the environment (``BENCH_MODEL_URL``); ``agent`` asks for the default answer (200 tokens),
``fanout`` for the fan-out scenario's long one (``BENCH_FANOUT_MODEL``).
"""

from __future__ import annotations

import os
from typing import Any

from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph


def _graph(model_name: str) -> Any:
    model = ChatOpenAI(
        model=model_name,
        base_url=os.environ["BENCH_MODEL_URL"],
        api_key="bench-no-key",
        streaming=True,
        max_retries=0,
    )

    async def call_model(state: MessagesState) -> dict[str, list[object]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("call_model", call_model)
    builder.add_edge(START, "call_model")
    return builder.compile()


agent = _graph(os.environ.get("BENCH_MODEL", "bench-model"))
fanout = _graph(os.environ.get("BENCH_FANOUT_MODEL", "bench-model@2000+500"))
