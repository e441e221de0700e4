"""What an agent-source argument names (decision 0034): local paths stay local, URLs and OCI
references are remote, Docker Hub references are normalised as docker-agent reads them."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from greenroom.agents._source_refs import (
    OciReference,
    catalog_reference,
    parse_oci_reference,
    remote_ref,
)
from greenroom.cli_serve import pull_interval

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pirate", OciReference("docker.io", "library/pirate")),
        ("agentcatalog/pirate", OciReference("docker.io", "agentcatalog/pirate")),
        ("docker.io/ns/agent:v1", OciReference("docker.io", "ns/agent", "v1")),
        ("oci://localhost:5000/a/b:2", OciReference("localhost:5000", "a/b", "2")),
        (
            "ghcr.io/o/r@sha256:" + "a" * 64,
            OciReference("ghcr.io", "o/r", digest="sha256:" + "a" * 64),
        ),
    ],
)
def test_oci_references_parse_as_docker_agent_reads_them(text: str, expected: OciReference) -> None:
    assert parse_oci_reference(text) == expected


def test_only_loopback_registries_are_plain_http() -> None:
    assert parse_oci_reference("pirate").api_base == "https://registry-1.docker.io"
    assert parse_oci_reference("127.0.0.1:5000/a").api_base == "http://127.0.0.1:5000"
    assert parse_oci_reference("localhost:5000/a").api_base == "http://localhost:5000"
    assert parse_oci_reference("[::1]:5000/a").api_base == "http://[::1]:5000"
    assert parse_oci_reference("registry.example.com/a").api_base == "https://registry.example.com"
    assert parse_oci_reference("localhost.evil.com/a").api_base == "https://localhost.evil.com"


@pytest.mark.parametrize("text", ["ns/Agent", "ns/a:b:c", "bad_host.com/x/y@sha256:12"])
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_oci_reference(text)


def test_local_paths_stay_local(tmp_path: Path) -> None:
    existing = tmp_path / "team"
    existing.mkdir()
    for text in [str(existing), "./agents", "../x/y", "~/a/b", "team.yaml", "x/team.yml", "pirate"]:
        assert remote_ref(text) is None, text


def test_keys_are_short_names() -> None:
    url = remote_ref("https://example.com/agents/pirate.yaml?ref=main")
    oci = remote_ref("registry.example.com/team/coder:v3")
    assert url is not None and (url.kind, url.key) == ("url", "pirate")
    assert oci is not None and (oci.kind, oci.key) == ("oci", "coder")


def test_catalog_references_map_to_the_configured_catalog() -> None:
    assert catalog_reference("agentcatalog/pirate", "docker.io/agentcatalog") == (
        "docker.io/agentcatalog/pirate"
    )
    assert catalog_reference("agentcatalog/pirate:2", "127.0.0.1:5000/mirror/") == (
        "127.0.0.1:5000/mirror/pirate:2"
    )
    assert catalog_reference("ghcr.io/o/r", "docker.io/agentcatalog") == "ghcr.io/o/r"


def test_the_pull_interval_is_minutes_unless_a_unit_is_given() -> None:
    assert [pull_interval(t) for t in ("5", "30s", "2m", "1h", "0")] == [300, 30, 120, 3600, 0]
    with pytest.raises(argparse.ArgumentTypeError):
        pull_interval("soon")
