"""``GET /metrics`` follows the server's token rule (docs/security.md): open when the server
has no token (loopback by default), else the server's token or ``--metrics-token``; the
metrics token opens nothing else."""

from __future__ import annotations

import pytest
from quart.testing import QuartClient as Client

from greenroom.cli import build_parser, main
from greenroom.errors import ConfigError
from greenroom.serve import ServeConfig, check_config
from greenroom.transport import AppConfig


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_open_on_loopback_without_a_token(client: Client) -> None:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    assert "greenroom_live_actors" in await response.get_data(as_text=True)


@pytest.mark.parametrize("app_config", [AppConfig(auth_token="s3cret")])
async def test_the_servers_token_is_needed_when_it_has_one(client: Client) -> None:
    refused = await client.get("/metrics")
    assert refused.status_code == 401
    assert (await refused.get_json())["code"] == "unauthorized"
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await client.get("/metrics", headers=bearer("wrong"))).status_code == 401
    assert (await client.get("/metrics", headers=bearer("s3cret"))).status_code == 200


@pytest.mark.parametrize(
    "app_config", [AppConfig(auth_token="s3cret", metrics_token="scrape-only")]
)
async def test_the_metrics_token_opens_metrics_and_nothing_else(client: Client) -> None:
    assert (await client.get("/metrics", headers=bearer("scrape-only"))).status_code == 200
    assert (await client.get("/metrics", headers=bearer("s3cret"))).status_code == 200
    assert (await client.get("/metrics")).status_code == 401
    assert (await client.get("/metrics", headers=bearer("scrape-onl"))).status_code == 401
    # The scraper's token is no API token.
    assert (await client.get("/api/sessions", headers=bearer("scrape-only"))).status_code == 401
    assert (await client.get("/api/sessions", headers=bearer("s3cret"))).status_code == 200


@pytest.mark.parametrize("app_config", [AppConfig(metrics_token="scrape-only")])
async def test_a_metrics_token_alone_closes_metrics(client: Client) -> None:
    assert (await client.get("/metrics")).status_code == 401
    assert (await client.get("/metrics", headers=bearer("scrape-only"))).status_code == 200


async def test_metrics_keeps_the_host_check(client: Client) -> None:
    """A DNS-rebinding page cannot read the metrics of a loopback server."""
    response = await client.get("/metrics", headers={"Host": "evil.example:8080"})
    assert response.status_code == 421


def test_the_cli_takes_a_metrics_token(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["serve", "--metrics-token", "scrape-only"])
    assert args.metrics_token == "scrape-only"
    monkeypatch.setenv("GREENROOM_METRICS_TOKEN", "from-env")
    assert build_parser().parse_args(["serve"]).metrics_token == "from-env"
    with pytest.raises(ConfigError, match="--metrics-token"):
        check_config(ServeConfig(metrics_token="has a space"))
    assert main(["serve", "--metrics-token", "has a space", "--port", "0"]) == 2


def test_serve_hands_the_metrics_token_and_log_format_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import greenroom.serve

    seen: list[ServeConfig] = []

    def fake_run(cfg: ServeConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(greenroom.serve, "run", fake_run)
    flags = ["--metrics-token", "scrape-only", "--log-format", "json", "--log-level", "warning"]
    assert main(["serve", "--port", "0", *flags]) == 0
    (cfg,) = seen
    assert cfg.metrics_token == "scrape-only"
