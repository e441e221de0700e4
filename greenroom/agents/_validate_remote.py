"""``greenroom validate`` of URLs and OCI references, and of catalog sub-agents when
``--agent-catalog`` is given (decision 0034): the files are fetched once, into a temporary
directory, through the egress policy (public addresses, plus ``--allow-private-network``)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from greenroom.errors import AgentConfigError

from ._diagnose import FileReport, diagnose
from ._remote_sources import RemoteSources
from ._source_refs import RemoteRef, remote_ref
from ._yaml import load_agent_file, parse_agent_file
from .tools._egress_policy import EgressPolicy, parse_networks


def split_remote(paths: Sequence[str]) -> list[tuple[str, RemoteRef | None]]:
    """Each argument with the remote source it names (None: a local path)."""
    out: list[tuple[str, RemoteRef | None]] = []
    for path in paths:
        try:
            out.append((path, remote_ref(path)))
        except ValueError:
            out.append((path, None))  # reported as a missing file
    return out


def _report(name: str, load: Any, **options: Any) -> FileReport:
    try:
        config = load()
    except AgentConfigError as exc:
        return FileReport(name, errors=tuple(exc.problems))
    return FileReport(name, warnings=tuple(diagnose(config, **options)), agents=len(config.agents))


def check_with_fetching(
    items: list[tuple[str, RemoteRef | None]],
    local_files: list[Path],
    *,
    allow_private_networks: Sequence[str] = (),
    agent_catalog: str = "",
    **options: Any,
) -> list[FileReport]:
    """Reports for the local files and the remote sources of ``items`` (in the given order),
    catalog sub-agents resolved when ``agent_catalog`` is given."""
    # Keys only name cache files here: one per argument (two may share a name).
    refs = [attrs.evolve(ref, key=str(i)) for i, (_, ref) in enumerate(items) if ref is not None]
    policy = EgressPolicy(parse_networks(allow_private_networks))
    with tempfile.TemporaryDirectory(prefix="greenroom-validate-") as tmp:
        remote = RemoteSources(refs, Path(tmp), policy, agent_catalog)
        remote.local = {str(i): p for i, p in enumerate(local_files)}
        trio.run(remote.refresh)
        external = remote.external if agent_catalog else None
        reports = [
            _report(str(p), lambda p=p: load_agent_file(p, external), **options)
            for p in local_files
        ]
        for ref in refs:
            state = remote.states[ref.key]
            if state.problem:
                reports.append(FileReport(ref.text, errors=(f"{ref.text}: {state.problem}",)))
                continue
            text = state.cache.read_text(encoding="utf-8")
            reports.append(
                _report(ref.text, lambda t=text, r=ref: parse_agent_file(t, r.text, external))
            )
    return reports
