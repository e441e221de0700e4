"""Browser tests: Playwright's sync API driving Debian's Chromium, on a thread of its own.

One browser is started per test session on a single-worker thread (Playwright's sync objects
belong to the thread that made them); each test gets a fresh context (no storage shared) and
runs its steps there with ``await browser.run(fn, ...)`` while its trio loop keeps serving the
in-process greenroom (``greenroom.testing``, real clock: the browser is a real client).

Without ``/usr/bin/chromium`` the tests skip, except under CI (the ``CI`` environment
variable), where a missing browser is a failure: ``.ci/run`` installs it. Playwright never
downloads a browser here.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.browser.support import CHROMIUM, BrowserThread


def _chromium_or_skip() -> None:
    if shutil.which(CHROMIUM) is None and not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing under CI: .ci/run must apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium); CI fails instead")


@pytest.fixture(scope="session")
def browser() -> Iterator[BrowserThread]:
    _chromium_or_skip()
    thread = BrowserThread()
    thread.start()
    try:
        yield thread
    finally:
        thread.close()
