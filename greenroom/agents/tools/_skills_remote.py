"""Remote skills: a skills source that is a URL, read per the well-known skills discovery.

As docker-agent: ``<url>/.well-known/skills/index.json`` lists ``{skills: [{name,
description, files}]}``; each listed file (``SKILL.md`` and its others) is fetched from
``<url>/.well-known/skills/<name>/<file>`` into a local copy, from which ``read_skill`` and
``read_skill_file`` read. File paths that are absolute, climb with ``..`` or hold ``\\ ? # [ ]``
or non-ASCII characters are skipped; the index and each file are read up to 1 MiB, each request
within 30 s. A source that cannot be read is logged and left out (the others still load).
The copies live under the data directory (``skills/<16 hex of the URL>/<name>/``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ._base import Tool
from ._skills import Skill, discover, skills_tools

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

FETCH_BUDGET = 30.0
LIMIT = 1024 * 1024
_BAD_CHARS = set("\\?#[]")


def valid_file_path(path: str) -> bool:
    if not path or path.startswith("/") or ".." in path:
        return False
    return all(0x20 <= ord(c) <= 0x7E and c not in _BAD_CHARS for c in path)


async def _get(client: httpx.AsyncClient, url: str) -> bytes | None:
    import httpx

    try:
        with trio.fail_after(FETCH_BUDGET):
            async with client.stream("GET", url) as response:
                if response.status_code != 200:
                    log.warning("skills: %s answered %d", url, response.status_code)
                    return None
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body.extend(chunk[: LIMIT - len(body)])
                    if len(body) >= LIMIT:
                        break
                return bytes(body)
    except (httpx.HTTPError, trio.TooSlowError) as exc:
        log.warning("skills: fetching %s failed: %s", url, exc)
        return None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


async def load_remote(base_url: str, cache: Path) -> list[Skill]:
    """The skills ``base_url`` publishes, copied under ``cache``."""
    base = base_url.rstrip("/")
    root = cache / hashlib.sha256(base.encode()).hexdigest()[:16]
    import httpx  # only for an agent with remote skills (greenroom validate never loads it)

    async with httpx.AsyncClient(follow_redirects=True) as client:
        raw = await _get(client, f"{base}/.well-known/skills/index.json")
        if raw is None:
            return []
        try:
            index: Any = json.loads(raw)
        except ValueError:
            log.warning("skills: the index of %s is not JSON", base)
            return []
        entries = index.get("skills") if isinstance(index, dict) else None
        skills: list[Skill] = []
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            name, description = entry.get("name"), entry.get("description")
            if not (isinstance(name, str) and valid_file_path(name) and "/" not in name):
                continue
            if not (isinstance(description, str) and description):
                continue
            files = [f for f in entry.get("files") or [] if isinstance(f, str)]
            kept: list[str] = []
            for file in files:
                if not valid_file_path(file):
                    continue
                data = await _get(client, f"{base}/.well-known/skills/{name}/{file}")
                if data is not None:
                    await trio.to_thread.run_sync(_write, root / name / file, data)
                    kept.append(file)
            others = tuple(f for f in kept if f != "SKILL.md")
            skills.append(Skill(name, description, root / name / "SKILL.md", others))
        return skills


def is_remote(source: str) -> bool:
    return source.startswith(("http://", "https://"))


async def load_skills(
    sources: tuple[str, ...], working_dir: Path, home: Path, cache: Path
) -> tuple[list[Tool], str]:
    """The skills tools over the local skills (``local``) and each remote source's; a remote
    skill replaces a local one of the same name."""
    found: list[Skill] = []
    if "local" in sources:
        found += await trio.to_thread.run_sync(discover, working_dir, home)
    for source in sources:
        if is_remote(source):
            found += await load_remote(source, cache)
    return skills_tools(found)
