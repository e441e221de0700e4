"""The optional capabilities of a runtime are declared in the contract (``_runtime.py``): the
helpers find them on a ``LocalRuntime``, not on a runtime without them, and narrow the type (mypy
checks the calls below without ``type: ignore``)."""

from __future__ import annotations

from greenroom.agents import (
    LocalRuntime,
    is_busy,
    mirrors_elicitation,
    parse_agent_file,
    supports_recall,
    supports_serve,
    supports_tool_rerun,
)
from tests.agents.test_delegation import Providers

FILE = """\
agents:
  root:
    model: openai/root
    instruction: You help.
"""


def test_a_local_runtime_has_every_optional_capability() -> None:
    runtime: object = LocalRuntime(
        parse_agent_file(FILE, "one.yaml"), provider_for=Providers().provider_for
    )
    assert supports_serve(runtime)
    assert callable(runtime.serve)
    assert supports_recall(runtime)
    runtime.set_recall_handler(None)
    assert supports_tool_rerun(runtime)
    assert callable(runtime.rerun_tool)
    assert mirrors_elicitation(runtime)
    assert not is_busy(runtime)  # no background agent task runs


def test_a_runtime_without_them_has_none() -> None:
    for runtime in (object(), None):
        assert not supports_serve(runtime)
        assert not supports_recall(runtime)
        assert not supports_tool_rerun(runtime)
        assert not mirrors_elicitation(runtime)
        assert not is_busy(runtime)
