"""What an agent-source argument names: a local file or directory, a URL, or an OCI reference.

``greenroom serve`` takes agent files as docker-agent does (decision 0034): ``https://...`` and
``http://...`` are URLs; ``oci://REF`` and anything that is not an existing path, has no
``.yaml``/``.yml`` suffix and parses as a registry reference (``docker.io/ns/agent:tag``,
``ns/agent``, ``localhost:5000/agent@sha256:...``) is an OCI artifact. A reference without a
registry is on Docker Hub (``docker.io``), as docker-agent (go-containerregistry) reads it.
This module does no I/O but ``Path.exists``.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import urlsplit

import attrs

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DEFAULT_AGENT_CATALOG = "docker.io/agentcatalog"
CATALOG_PREFIX = "agentcatalog/"
"""``sub_agents: [agentcatalog/NAME]`` names agent NAME of the configured agent catalog."""

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
_REGISTRY = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*"
    r"|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$"
)


@attrs.frozen
class OciReference:
    """``registry/repository:tag`` or ``registry/repository@digest``, Docker Hub normalised."""

    registry: str
    repository: str
    tag: str = "latest"
    digest: str = ""

    @property
    def identifier(self) -> str:
        """What the manifest is asked by: the digest when given, else the tag."""
        return self.digest or self.tag

    @property
    def api_base(self) -> str:
        """The registry's HTTP API root (Docker Hub's API host; plain HTTP on loopback only,
        as go-containerregistry does)."""
        host = DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        plain = name in ("localhost", "[::1]") or name.startswith("127.")
        return f"{'http' if plain else 'https'}://{host}"

    def __str__(self) -> str:
        at = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{self.registry}/{self.repository}{at}"


def parse_oci_reference(text: str) -> OciReference:
    """Parse ``[oci://][registry/]repository[:tag][@digest]``.

    Raises:
        ValueError: ``text`` is not a reference (the message says why).
    """
    rest = text.strip().removeprefix("oci://")
    digest = ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.match(digest):
            raise ValueError(f"{text!r}: the digest must be sha256:<64 hex digits>")
    tag = "latest"
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ValueError(f"{text!r}: {tag!r} is not a tag")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        if not _REGISTRY.match(first):
            raise ValueError(f"{text!r}: {first!r} is not a registry host")
        registry, repository = first, remainder
    else:
        registry, repository = DOCKER_HUB, rest
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if not _REPOSITORY.match(repository):
        raise ValueError(f"{text!r}: {repository!r} is not a repository name")
    return OciReference(registry, repository, tag, digest)


@attrs.frozen
class RemoteRef:
    """A remote agent source: what the operator wrote, its kind and its key in the server."""

    text: str
    kind: Literal["url", "oci"]
    key: str

    @property
    def oci(self) -> OciReference:
        return parse_oci_reference(self.text)


def _key(name: str) -> str:
    return _KEY_CHARS.sub("_", name).strip("_") or "agent"


def is_url(text: str) -> bool:
    return text.startswith(("https://", "http://"))


def remote_ref(text: str) -> RemoteRef | None:
    """The remote source ``text`` names, or None for a local path.

    The key (the name in ``GET /api/agents``) is the file name of a URL without its extension,
    and the last part of an OCI repository (``docker.io/ns/pirate:1`` serves as ``pirate``).
    """
    if is_url(text):
        stem = PurePosixPath(urlsplit(text).path).stem
        return RemoteRef(text, "url", _key(stem or urlsplit(text).hostname or ""))
    local = (
        Path(text).exists()
        or Path(text).suffix in (".yaml", ".yml")
        or "/" not in text
        or text.startswith(("/", ".", "~"))
    )
    if local and not text.startswith("oci://"):
        return None
    try:
        ref = parse_oci_reference(text)
    except ValueError:
        if text.startswith("oci://"):
            raise
        return None
    return RemoteRef(text, "oci", _key(ref.repository.rsplit("/", 1)[-1]))


def is_external_agent(ref: str) -> bool:
    """An agent named in ``sub_agents``/``handoffs`` that lives elsewhere (a catalog, a
    registry, a URL): local agent names never contain ``/`` (as docker-agent decides)."""
    return "/" in ref


def catalog_reference(ref: str, catalog: str) -> str:
    """The OCI reference of sub-agent ``ref``: ``agentcatalog/NAME`` is NAME in ``catalog``
    (``REGISTRY/NAMESPACE``); any other reference is itself."""
    if ref.startswith(CATALOG_PREFIX) and catalog:
        return f"{catalog.rstrip('/')}/{ref.removeprefix(CATALOG_PREFIX)}"
    return ref
