"""axe-core in the page: the vendored ``axe.min.js`` (npm ``axe-core``, decision 0023), checked
against its recorded sha256, injected into the page under test and run there.

``serious(page)`` returns the serious and critical violations as readable lines (rule id, help
text and the first offending elements); an empty list means none.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE_VERSION = "4.14.1"
AXE_FILE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"
BLOCKING = ("serious", "critical")


@cache
def axe_source() -> str:
    data = AXE_FILE.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != AXE_SHA256:
        raise AssertionError(f"{AXE_FILE} is not axe-core {AXE_VERSION} (sha256 {digest})")
    return data.decode()


def run_axe(page: Page) -> dict[str, Any]:
    """axe-core's full result for the page as it is now (WCAG 2.x A/AA and best practices)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated through the DevTools protocol: the page's CSP (script-src 'self') stays on.
        page.evaluate(axe_source())
    result: dict[str, Any] = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ["violations"]});
            return {
              version: axe.version,
              passes: r.passes.length,
              violations: r.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")),
              })),
            };
        }"""
    )
    return result


def serious(page: Page, where: str) -> list[str]:
    """The serious and critical violations on the page, each as ``where: id (impact): help``."""
    result = run_axe(page)
    assert result["version"] == AXE_VERSION
    assert result["passes"] > 10, result  # axe really looked at the page
    return [
        f"{where}: {v['id']} ({v['impact']}): {v['help']} at {v['nodes']}"
        for v in result["violations"]
        if v["impact"] in BLOCKING
    ]
