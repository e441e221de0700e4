"""Skills: SKILL.md files found where docker-agent looks, offered through ``read_skill``.

An agent with ``skills: true`` (or a source list holding ``local``) gets the skills found on
disk, later places overriding earlier ones of the same name:

- in the home directory: ``~/.codex/skills/`` (any depth), ``~/.claude/skills/`` (one level),
  ``~/.agents/skills/`` (any depth);
- in the project: ``.claude/skills/`` of the working directory (one level), then
  ``.agents/skills/`` of every directory from the git root down to the working directory (one
  level; the closest wins; only the working directory's when it is not in a repository).

A skill is a directory with a ``SKILL.md`` whose YAML front matter (between ``---`` lines)
has a ``name`` and a ``description``; hidden directories and symlinked skill directories (one
level) are skipped. The skills are listed in the system prompt; ``read_skill`` returns a
skill's SKILL.md and ``read_skill_file`` (offered when a skill has other files) one of its
files, by a relative path that must stay inside the skill's directory. Remote sources (URLs)
are read by ``_skills_remote.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ..providers._base import ToolSpec
from ._base import READ_ONLY, FunctionTool, Tool, ToolContext, ToolResult, error, schema, string

SKILL_FILE = "SKILL.md"
FILES_LISTED = 50
"""Supporting files listed per skill."""
READ_LIMIT = 1024 * 1024
"""Bytes ``read_skill`` and ``read_skill_file`` return at most."""


@attrs.frozen
class Skill:
    name: str
    description: str
    path: Path
    files: tuple[str, ...] = ()
    """Paths of the skill's other files, relative to its directory."""

    @property
    def base(self) -> Path:
        return self.path.parent


def parse_front_matter(text: str) -> Mapping[str, Any] | None:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    if end == -1:
        return None
    try:
        data = YAML(typ="safe", pure=True).load(text[3:end])
    except YAMLError:
        return None
    return data if isinstance(data, Mapping) else None


def _supporting_files(base: Path) -> tuple[str, ...]:
    found: list[str] = []
    for root, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            relative = (Path(root) / name).relative_to(base).as_posix()
            if relative != SKILL_FILE and not name.startswith("."):
                found.append(relative)
            if len(found) >= FILES_LISTED:
                return tuple(found)
    return tuple(found)


def load_skill(path: Path) -> Skill | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    meta = parse_front_matter(text)
    if meta is None:
        return None
    name, description = meta.get("name"), meta.get("description")
    if not (isinstance(name, str) and name and isinstance(description, str) and description):
        return None
    return Skill(name, description, path, _supporting_files(path.parent))


def _flat(directory: Path) -> Iterator[Skill]:
    if not directory.is_dir():
        return
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        skill = load_skill(entry / SKILL_FILE)
        if skill is not None:
            yield skill


def _recursive(directory: Path) -> Iterator[Skill]:
    if not directory.is_dir():
        return
    seen: set[str] = {os.path.realpath(directory)}
    for root, dirs, files in os.walk(directory, followlinks=True):
        kept = []
        for name in sorted(dirs):
            real = os.path.realpath(Path(root) / name)
            if not name.startswith(".") and real not in seen:
                seen.add(real)
                kept.append(name)
        dirs[:] = kept
        if SKILL_FILE in files:
            skill = load_skill(Path(root) / SKILL_FILE)
            if skill is not None:
                yield skill


def _project_dirs(working_dir: Path) -> list[Path]:
    """From the git root down to ``working_dir`` (only it outside a repository)."""
    current = working_dir.absolute()
    chain = [current, *current.parents]
    for index, candidate in enumerate(chain):
        if (candidate / ".git").exists():
            return list(reversed(chain[: index + 1]))
    return [current]


def discover(working_dir: Path, home: Path) -> list[Skill]:
    """The local skills for a session working in ``working_dir``, by name."""
    found: dict[str, Skill] = {}
    places = [
        _recursive(home / ".codex" / "skills"),
        _flat(home / ".claude" / "skills"),
        _recursive(home / ".agents" / "skills"),
        _flat(working_dir / ".claude" / "skills"),
        *(_flat(d / ".agents" / "skills") for d in _project_dirs(working_dir)),
    ]
    for place in places:
        for skill in place:
            found[skill.name] = skill
    return [found[name] for name in sorted(found)]


def instructions(skills: Sequence[Skill]) -> str:
    lines = [
        "Skills provide specialized instructions for specific tasks. When a user's request "
        "matches a skill's description, use read_skill to load its instructions.",
        "",
    ]
    if any(skill.files for skill in skills):
        lines += [
            "Some skills have supporting files. Use read_skill_file to load referenced files "
            "on demand; do not preload them.",
            "",
        ]
    lines.append("<available_skills>")
    for skill in skills:
        lines += [
            "  <skill>",
            f"    <name>{skill.name}</name>",
            f"    <description>{skill.description}</description>",
        ]
        if skill.files:
            lines.append(f"    <files>{', '.join(skill.files)}</files>")
        lines.append("  </skill>")
    lines.append("</available_skills>")
    return "\n".join(lines)


def _read(path: Path) -> ToolResult:
    try:
        with path.open("rb") as f:
            return ToolResult(f.read(READ_LIMIT).decode(errors="replace"))
    except OSError as exc:
        return error(f"reading file: {exc.strerror or exc}")


def _read_inside(skill: Skill, relative: str) -> ToolResult:
    if not relative or relative.startswith(("/", "\\")) or ".." in relative:
        return error(f"invalid file path {relative!r}")
    base = Path(os.path.realpath(skill.base))
    target = Path(os.path.realpath(skill.base / relative))
    if target != base and base not in target.parents:
        return error(f"path {relative!r} escapes skill directory")
    return _read(target)


def skills_tools(skills: Sequence[Skill]) -> tuple[list[Tool], str]:
    """``read_skill`` (and ``read_skill_file``) over ``skills``, and the instructions listing
    them; nothing when there are none."""
    by_name = {skill.name: skill for skill in skills}
    if not by_name:
        return [], ""

    async def read_skill(arguments: Mapping[str, Any]) -> ToolResult:
        skill = by_name.get(str(arguments.get("name", "")))
        if skill is None:
            return error(f"skill {str(arguments.get('name', ''))!r} not found")
        return await trio.to_thread.run_sync(_read, skill.path)

    async def read_skill_file(arguments: Mapping[str, Any]) -> ToolResult:
        name, relative = str(arguments.get("skill_name", "")), str(arguments.get("path", ""))
        skill = by_name.get(name)
        if skill is None:
            return error(f"skill {name!r} not found")
        return await trio.to_thread.run_sync(_read_inside, skill, relative)

    tools: list[Tool] = [
        FunctionTool(
            ToolSpec(
                "read_skill",
                "Read the content of a skill by name. Use this when a user's request matches "
                "an available skill.",
                schema({"name": string("The name of the skill to read")}, ("name",)),
            ),
            read_skill,
            READ_ONLY,
            "skills",
        )
    ]
    if any(skill.files for skill in skills):
        properties = {
            "skill_name": string("The name of the skill that contains the file"),
            "path": string(
                "The relative path to the file within the skill (e.g. references/FORMS.md)"
            ),
        }
        tools.append(
            FunctionTool(
                ToolSpec(
                    "read_skill_file",
                    "Read a supporting file from a skill (e.g. references, scripts, assets). "
                    "Use when skill instructions reference additional files.",
                    schema(properties, ("skill_name", "path")),
                ),
                read_skill_file,
                READ_ONLY,
                "skills",
            )
        )
    return tools, instructions(skills)


def build_skills(sources: Sequence[str], ctx: ToolContext) -> tuple[list[Tool], str]:
    """The skills tools of an agent with ``skills`` sources (only ``local`` is read); the home
    directory is the context's ``HOME``."""
    if "local" not in sources:
        return [], ""
    home = Path(ctx.env.get("HOME") or Path.home())
    return skills_tools(discover(Path(ctx.working_dir), home))
