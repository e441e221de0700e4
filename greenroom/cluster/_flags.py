"""The cluster options of ``greenroom serve``: checked here, each error naming its flag."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from greenroom.errors import ConfigError

DEFAULT_LEASE_TTL = 10.0
_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ADVERTISE_URL = re.compile(r"https?://[^/?#\s]+/?")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def is_cluster_db(db: str) -> bool:
    """Whether ``--db`` names a PostgreSQL database (which several nodes share)."""
    return db.startswith(("postgresql://", "postgres://"))


def check_cluster_flags(
    db: str, host: str, node_id: str, advertise_url: str, lease_ttl: float, lease_renew: float
) -> None:
    """The cluster flags: only with PostgreSQL, and each one usable."""
    if not is_cluster_db(db):
        given = [
            flag
            for flag, value in (
                ("--node-id", node_id),
                ("--advertise-url", advertise_url),
                ("--lease-ttl", lease_ttl != DEFAULT_LEASE_TTL),
                ("--lease-renew", lease_renew),
            )
            if value
        ]
        if given:
            raise ConfigError(
                f"{', '.join(given)} need --db postgresql://...: an SQLite or in-memory "
                "database serves one node only"
            )
        return
    if node_id and not _NODE_ID.fullmatch(node_id):
        raise ConfigError(
            "--node-id (or GREENROOM_NODE_ID) must be 1-64 letters, digits, '.', '_' or '-'"
        )
    if advertise_url and not _ADVERTISE_URL.fullmatch(advertise_url):
        raise ConfigError(
            "--advertise-url (or GREENROOM_ADVERTISE_URL) must be http(s)://host[:port] "
            f"with no path (got {advertise_url!r})"
        )
    if not advertise_url and host.strip("[]") in WILDCARD_HOSTS:
        raise ConfigError(
            f"--advertise-url is required with --host {host}: other nodes need an "
            "address they can reach this one at"
        )
    if not lease_ttl > 0:
        raise ConfigError("--lease-ttl must be a positive number of seconds")
    if lease_renew < 0 or lease_renew > lease_ttl / 2:
        raise ConfigError(
            "--lease-renew must be positive and at most half of --lease-ttl "
            f"({lease_ttl:g} s), so that one lost renewal does not fence the node"
        )


def redact_dsn(db: str) -> str:
    """A database URL without its password (for logs and the startup summary)."""
    parts = urlsplit(db)
    if parts.password is None:
        return db
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
