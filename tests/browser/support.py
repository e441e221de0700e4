"""The browser thread and helpers shared by the browser tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import trio
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.slowness import slow

CHROMIUM = "/usr/bin/chromium"
expect.set_options(timeout=slow(5_000))  # Playwright's own default, scaled
# Screenshots and failure evidence: the test output directory when one is given, else the
# checkout's .artifacts/ (ignored by git).
ARTIFACTS = Path(
    os.environ.get("GREENROOM_TEST_OUTPUT") or Path(__file__).resolve().parents[2] / ".artifacts"
)
T = TypeVar("T")


class BrowserThread:
    """One Chromium, owned by one worker thread; tests submit functions of a fresh page."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="playwright")
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None

    def _start(self) -> None:
        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--disable-gpu", "--disable-quic"]
        )

    def start(self) -> None:
        self._executor.submit(self._start).result(timeout=slow(60))

    def _close(self) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._playwright is not None:
            self._playwright.stop()

    def close(self) -> None:
        try:
            self._executor.submit(self._close).result(timeout=slow(30))
        finally:
            self._executor.shutdown()

    def _with_page(
        self, fn: Callable[..., T], args: tuple[Any, ...], scheme: str, viewport: tuple[int, int]
    ) -> T:
        assert self._browser is not None
        context = self._browser.new_context(
            viewport={"width": viewport[0], "height": viewport[1]},
            color_scheme=scheme,  # type: ignore[arg-type]
        )
        context.set_default_timeout(slow(10_000))
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if _is_bug(msg) else None)
        try:
            result = fn(page, *args)
        except Exception as exc:
            _keep_evidence(page, getattr(fn, "__name__", "page"), exc)
            raise
        finally:
            context.close()
        assert errors == [], f"the page logged errors: {errors}"
        return result

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        scheme: str = "light",
        viewport: tuple[int, int] = (1000, 700),
    ) -> T:
        """Run ``fn(page, *args)`` on the browser thread; the trio loop stays free meanwhile."""
        future = self._executor.submit(self._with_page, fn, args, scheme, viewport)
        return await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)


def _keep_evidence(page: Page, name: str, exc: Exception) -> None:
    """A failed step leaves a screenshot in .artifacts/ and the page's text on the error."""
    with suppress(Exception):
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"failed-{name}.png"), full_page=True)
    with suppress(Exception):
        exc.add_note(f"the page said:\n{page.inner_text('body', timeout=slow(2000))}")


def _is_bug(message: ConsoleMessage) -> bool:
    """Console errors that mean a bug (Chromium also logs refused requests and sockets)."""
    text = message.text
    expected = ("Failed to load resource", "WebSocket connection to")
    return message.type == "error" and not text.startswith(expected)


def open_page(page: Page, url: str) -> None:
    """Load the page and wait until its WebSocket is live."""
    page.goto(url)
    expect(page.locator("#connection")).to_have_text("live")
