"""Agent sources fetched over the network (URLs, OCI artifacts) and external sub-agents
(``agentcatalog/NAME``), cached on disk, refreshed every ``--pull-interval`` (decision 0034).

A fetched file is parsed before it is kept: only a good copy is written to the cache (atomically,
and only when it changed), so :class:`~greenroom.agents.AgentSources` serves the cache file like
a local one and reloads it when it changes. A fetch that fails (HTTP 404, the network, a refused
address, a file that does not parse) keeps the last good copy: a warning is logged and the
source's row in ``GET /api/agents`` says why (``source_error``). A source with no good copy at
start is an error naming it.

httpx (and the egress guard) are imported on the first fetch, never by a server without remote
sources.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from greenroom.errors import AgentConfigError, ConfigError

from ._config import AgentFile
from ._source_refs import (
    CATALOG_PREFIX,
    RemoteRef,
    catalog_reference,
    is_external_agent,
    is_url,
    parse_oci_reference,
)
from ._yaml import parse_agent_file
from ._yaml_external import ExternalAgentUnavailable
from .tools._egress_policy import EgressPolicy

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 30.0  # seconds one fetch (every request of it) may take


@attrs.define
class RemoteState:
    """One remote source: where its good copy is cached, and how its last fetch went."""

    ref: RemoteRef
    cache: Path
    fetched_at: float | None = None  # wall-clock time of the last good fetch
    problem: str = ""  # why the last fetch failed; "" when it did not


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically unless it already holds it. True when written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return True


async def _fetch_checked(client: httpx.AsyncClient, ref: RemoteRef, name: str) -> str:
    """The text at ``ref`` once it parses as an agent file (external sub-agents of a fetched
    file are not resolved here: they are resolved when the cached copy loads)."""
    from ._agent_fetch import FetchFailed, fetch_agent_text

    with trio.move_on_after(FETCH_TIMEOUT) as scope:
        try:
            text = await fetch_agent_text(client, ref)
        except FetchFailed as exc:
            raise ExternalAgentUnavailable(str(exc)) from None
    if scope.cancelled_caught:
        raise ExternalAgentUnavailable(f"no answer within {FETCH_TIMEOUT:g} s")
    try:
        parse_agent_file(text, name)
    except AgentConfigError as exc:
        raise ExternalAgentUnavailable(f"not a valid agent file: {exc.message}") from None
    return text


def external_refs(text: str) -> list[str]:
    """The external sub-agent references (``agentcatalog/pirate``, URLs...) of an agent file's
    text, without validating it (a file that does not parse has none)."""
    try:
        doc = YAML(typ="safe", pure=True).load(text)
    except YAMLError:
        return []
    agents = doc.get("agents") if isinstance(doc, dict) else None
    if not isinstance(agents, dict):
        return []
    found: list[str] = []
    for agent in agents.values():
        for key in ("sub_agents", "handoffs"):
            names = agent.get(key) if isinstance(agent, dict) else None
            for name in names if isinstance(names, list) else []:
                if isinstance(name, str) and is_external_agent(name) and name not in agents:
                    found.append(name)
    return list(dict.fromkeys(found))


class ExternalCatalog:
    """External sub-agents: fetched (and cached) by :meth:`refresh`, read by :meth:`agent_file`
    while an agent file is parsed (from memory: parsing never waits on the network).

    ``catalog`` is ``REGISTRY/NAMESPACE`` for ``agentcatalog/NAME`` (``--agent-catalog``);
    "" turns catalog references into an error saying what to configure.
    """

    def __init__(self, cache_dir: Path, catalog: str) -> None:
        self.cache_dir = cache_dir
        self.catalog = catalog.strip().rstrip("/")
        if self.catalog.lower() == "none":
            self.catalog = ""
        self.texts: dict[str, str] = {}
        self.problems: dict[str, str] = {}
        self.generation = 0  # bumped when a fetched agent changes: files naming it reload

    def remote(self, ref: str) -> RemoteRef:
        """Where sub-agent ``ref`` is fetched from. Raises ExternalAgentUnavailable."""
        if ref.startswith(CATALOG_PREFIX) and not self.catalog:
            raise ExternalAgentUnavailable(
                f"agent {ref!r} is in an agent catalog and none is configured: start "
                "greenroom serve with --agent-catalog REGISTRY/NAMESPACE (docker-agent's "
                "catalog is docker.io/agentcatalog)"
            )
        if is_url(ref):
            return RemoteRef(ref, "url", ref)
        target = catalog_reference(ref, self.catalog)
        try:
            parse_oci_reference(target)
        except ValueError as exc:
            raise ExternalAgentUnavailable(f"agent {ref!r}: {exc}") from None
        return RemoteRef(target, "oci", ref)

    def _cache(self, ref: str) -> Path:
        return self.cache_dir / f"{hashlib.sha256(ref.encode()).hexdigest()[:24]}.yaml"

    def agent_file(self, ref: str) -> AgentFile:
        remote = self.remote(ref)
        text = self.texts.get(ref)
        if text is None:
            try:
                text = self._cache(ref).read_text(encoding="utf-8")
            except OSError:
                why = self.problems.get(
                    ref, "not fetched yet (it is fetched at start and every --pull-interval)"
                )
                raise ExternalAgentUnavailable(
                    f"agent {ref!r} from {remote.text} cannot be loaded: {why}; check "
                    "--agent-catalog, the network, and --allow-private-network for a "
                    "registry on a private address"
                ) from None
            self.texts[ref] = text
        try:
            return parse_agent_file(text, remote.text)
        except AgentConfigError as exc:  # a cache edited by hand
            raise ExternalAgentUnavailable(f"agent {ref!r}: {exc.message}") from None

    async def refresh(self, client: httpx.AsyncClient, texts: Iterable[str]) -> list[str]:
        """Fetch the external sub-agents named in ``texts``; warnings for those kept stale."""
        warnings: list[str] = []
        refs = list(dict.fromkeys(ref for text in texts for ref in external_refs(text)))
        for ref in refs:
            try:
                remote = self.remote(ref)
            except ExternalAgentUnavailable:
                continue  # reported at the key path when the file loads
            try:
                text = await _fetch_checked(client, remote, remote.text)
            except ExternalAgentUnavailable as exc:
                self.problems[ref] = str(exc)
                if self.texts.get(ref) is not None or self._cache(ref).exists():
                    warnings.append(
                        f"agent {ref!r}: cannot fetch {remote.text} ({exc}); keeping the last "
                        "good copy"
                    )
                continue
            self.problems.pop(ref, None)
            if self.texts.get(ref) != text:
                _write_if_changed(self._cache(ref), text)
                if ref in self.texts:
                    log.info("agent %r changed at %s", ref, remote.text)
                self.texts[ref] = text
                self.generation += 1
        return warnings


class RemoteSources:
    """The remote agent sources of one server (see the module docstring)."""

    def __init__(
        self,
        refs: Iterable[RemoteRef],
        cache_dir: Path,
        policy: EgressPolicy,
        catalog: str,
    ) -> None:
        self.cache_dir = cache_dir
        self.policy = policy
        self.states: dict[str, RemoteState] = {}
        for ref in refs:
            if ref.key in self.states:
                other = self.states[ref.key].ref.text
                raise AgentConfigError(
                    [f"{ref.text}: agent source key {ref.key!r} is also used by {other}"]
                )
            cache = cache_dir / f"{ref.key}-{_digest(ref.text)}.yaml"
            self.states[ref.key] = RemoteState(ref, cache)
        self.external = ExternalCatalog(cache_dir / "external", catalog)
        self.rounds = 0  # refresh rounds done (start included)
        self._round_done = trio.Event()
        self.local: dict[str, Path] = {}

    def files(self) -> dict[str, Path]:
        """Each remote source's key and its cached copy (what AgentSources serves)."""
        return {key: state.cache for key, state in self.states.items()}

    def origin(self, key: str) -> RemoteState | None:
        return self.states.get(key)

    def _client(self) -> httpx.AsyncClient:
        from ._agent_fetch import source_client

        return source_client(self.policy, FETCH_TIMEOUT)

    async def start(self, local_files: Mapping[str, Path]) -> list[str]:
        """Fetch every source (and external sub-agent) once. Returns warnings (sources served
        from their cache).

        Raises:
            ConfigError: a source could not be fetched and has no cached copy: the message
                names it, says why and what to do.
        """
        self.local = dict(local_files)
        warnings = await self.refresh(log_warnings=False)  # the server prints them
        missing = [state for state in self.states.values() if not state.cache.exists()]
        if missing:
            lines = [
                f"agent source {s.ref.text} cannot be fetched: {s.problem}"
                + (
                    f" (read as an OCI reference: no local file {s.ref.text} exists)"
                    if s.ref.kind == "oci" and not s.ref.text.startswith("oci://")
                    else ""
                )
                for s in missing
            ]
            raise ConfigError(
                "; ".join(lines) + " (no copy is cached yet under "
                f"{self.cache_dir}: check the address, the network, and "
                "--allow-private-network for a source on a private address)"
            )
        return warnings

    async def refresh(self, *, log_warnings: bool = True) -> list[str]:
        """One round: every source, then the external sub-agents the files name. Returns (and
        logs) a warning per source kept at its last good copy."""
        warnings: list[str] = []
        if not self.states and not self._has_external():
            return warnings
        async with self._client() as client:
            for state in self.states.values():
                warning = await self._refresh_one(client, state)
                if warning:
                    warnings.append(warning)
            warnings.extend(await self.external.refresh(client, self._texts()))
        if log_warnings:
            for line in warnings:
                log.warning("%s", line)
        self.rounds += 1
        self._round_done.set()
        self._round_done = trio.Event()
        return warnings

    async def wait_rounds(self, rounds: int) -> None:
        """Until ``rounds`` refresh rounds are done (start included)."""
        while self.rounds < rounds:
            await self._round_done.wait()

    def _has_external(self) -> bool:
        return any(external_refs(text) for text in self._texts())

    def _texts(self) -> list[str]:
        texts = []
        for path in [*self.local.values(), *(s.cache for s in self.states.values())]:
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue
        return texts

    async def _refresh_one(self, client: httpx.AsyncClient, state: RemoteState) -> str:
        try:
            text = await _fetch_checked(client, state.ref, state.ref.text)
        except ExternalAgentUnavailable as exc:
            state.problem = str(exc)
            if not state.cache.exists():
                return ""
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(state.cache.stat().st_mtime))
            return (
                f"agent source {state.ref.key!r}: cannot fetch {state.ref.text} ({exc}); "
                f"serving the last good copy (cached {when})"
            )
        state.problem = ""
        state.fetched_at = time.time()
        if _write_if_changed(state.cache, text) and self.rounds:
            log.info("agent source %r changed at %s", state.ref.key, state.ref.text)
        return ""

    async def refresh_forever(self, interval: float) -> None:
        """Refresh every ``interval`` seconds until cancelled."""
        while True:
            await trio.sleep(interval)
            try:
                await self.refresh()
            except Exception:  # a background loop: logged, tried again next round
                log.exception("refreshing the agent sources failed")

    def row(self, key: str) -> dict[str, Any]:
        """Remote source ``key``'s fields in ``GET /api/agents``: ``source`` (its reference)
        and, after a failed fetch, ``source_error`` (why; the last good copy is served)."""
        state = self.states.get(key)
        if state is None:
            return {}
        row: dict[str, Any] = {"source": state.ref.text}
        if state.problem:
            row["source_error"] = f"{state.problem}; serving the last good copy"
        return row
