"""``serving_in_thread``: the embedded server of ``greenroom chat`` on its own thread."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from greenroom.errors import GreenroomError
from greenroom.serve import ServeConfig, serving_in_thread
from tests.slowness import slow

pytestmark = pytest.mark.slow


def test_serves_then_stops_and_releases_the_database(tmp_path: Path) -> None:
    cfg = ServeConfig(port=0, db=str(tmp_path / "chat.sqlite3"))
    with serving_in_thread(cfg) as url:
        assert httpx.get(f"{url}/health", timeout=slow(10)).json()["status"] == "ok"
        created = httpx.post(f"{url}/api/sessions", json={"title": "kept"}, timeout=slow(10))
        assert created.status_code == 200
        # One owner per database file: a second server is refused, naming the file.
        with pytest.raises(GreenroomError, match=r"chat\.sqlite3"), serving_in_thread(cfg):
            pass
    with serving_in_thread(cfg) as url:  # the lock went with the first server
        titles = [s["title"] for s in httpx.get(f"{url}/api/sessions", timeout=slow(10)).json()]
    assert titles == ["kept"]
