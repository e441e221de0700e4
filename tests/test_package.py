"""greenroom as a real package (issue 21): a wheel built from the checkout holds the chat page,
the bundled agent and both migration folders, and, installed into a fresh virtual environment,
its ``greenroom`` command validates an agent file and serves a turn.

No network: the wheel is built without build isolation (the dev venv's setuptools), and the
fresh venv finds greenroom's dependencies through a ``.pth`` line naming this venv's
site-packages (only the dependencies: this venv's editable greenroom is not visible there, as
a ``.pth`` line adds a path without running the ``.pth`` files in it). greenroom itself comes
from the wheel, which the test checks.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.slowness import slow

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DATA = (
    "greenroom/web/static",
    "greenroom/agents/bundled",
    "greenroom/persistence/migrations",
    "greenroom/persistence/pg_migrations",
)


def data_files() -> list[str]:
    """Every package-data file of the checkout, as a path inside the wheel."""
    found = []
    for folder in PACKAGE_DATA:
        for path in sorted((ROOT / folder).iterdir()):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".py":
                found.append(path.relative_to(ROOT).as_posix())
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the checkout (the build leaves nothing in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "greenroom", source / "greenroom", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)]
    subprocess.run(
        [*command, str(source)], check=True, capture_output=True, timeout=slow(300), cwd=source
    )
    (built,) = out.glob("greenroom-*.whl")
    return built


def test_the_wheel_holds_the_page_the_bundled_agent_and_the_migrations(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = data_files()
    assert "greenroom/web/static/index.html" in expected
    assert any(p.startswith("greenroom/persistence/pg_migrations/") for p in expected)
    assert [p for p in expected if p not in names] == []
    assert "greenroom/py.typed" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "greenroom = greenroom.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; returns its ``bin`` folder."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=slow(120),
    )
    (fresh_site,) = venv.glob("lib/python3.*/site-packages")
    (fresh_site / "greenroom_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--no-compile", "--quiet", str(wheel)],
        check=True,
        capture_output=True,
        timeout=slow(300),
    )
    return venv / "bin"


def clean_env() -> dict[str, str]:
    """This environment without model keys (the bundled agent then uses the echo model) and
    without a path that would find the checkout."""
    drop = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY")
    return {k: v for k, v in os.environ.items() if k not in drop and k != "PYTHONPATH"}


def test_the_installed_command_is_the_wheel_s(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed / "python"), "-c", "import greenroom; print(greenroom.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
        timeout=slow(60),
    ).stdout.strip()
    assert Path(where).is_relative_to(installed.parent)
    bundled = Path(where).parent / "agents" / "bundled" / "default.yaml"
    done = subprocess.run(
        [str(installed / "greenroom"), "validate", str(bundled)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
        timeout=slow(60),
    )
    assert done.returncode == 0, done.stderr
    assert "1 ok" in done.stdout


def wait_for_url(log: Path, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + slow(60)
    while time.monotonic() < deadline and process.poll() is None:
        text = log.read_text(errors="replace")
        if "greenroom listening on " in text:
            return text.split("greenroom listening on ", 1)[1].split()[0]
        time.sleep(0.05)  # real clock: polling the child's output file
    raise AssertionError(f"no listening line (exit {process.poll()}):\n{log.read_text()}")


def call(url: str, method: str, path: str, body: object = None) -> tuple[int, bytes, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=slow(30)) as response:
        return response.status, response.read(), response.headers.get("Content-Type", "")


def test_the_installed_server_serves_the_page_and_a_turn(installed: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    db = tmp_path / "sessions.sqlite3"  # a SQLite file: the packaged migrations run
    command = [str(installed / "greenroom"), "serve", "--port", "0", "--db", str(db)]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--no-titles"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            env=clean_env(),
        )
    try:
        url = wait_for_url(log, process)
        status, page, kind = call(url, "GET", "/")
        assert (status, kind) == (200, "text/html; charset=utf-8")
        assert b"<html" in page.lower()
        _, created, _ = call(url, "POST", "/api/sessions", {})
        session = json.loads(created)["id"]
        message = {"messages": [{"role": "user", "content": "hello from the wheel"}]}
        status, stream, _ = call(url, "POST", f"/api/sessions/{session}/agent/default", message)
        assert status == 200
        events = [json.loads(line[5:]) for line in stream.splitlines() if line[:5] == b"data:"]
        said = "".join(e["content"] for e in events if e["type"] == "agent_choice")
        assert "hello from the wheel" in said  # the echo model repeats the message
        assert events[-1]["type"] == "stream_stopped"
    finally:
        process.terminate()
        process.wait(timeout=slow(30))
    assert db.exists()
