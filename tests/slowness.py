"""One factor for every real-clock wait in the suite: ``GREENROOM_TEST_SLOWNESS`` (default 1).

A wait that depends on how fast processes start or the machine runs (a child server's start, a
terminal's or a browser's answer, a cluster's failover, a deadline on a live socket) is written
``slow(seconds)``, so the whole suite can be given more time on a loaded machine by one setting
(``make test-under-load`` raises it). Waits on trio's mock clock are virtual and never scaled.
"""

from __future__ import annotations

import math
import os


def slowness() -> float:
    """The factor, read from the environment (1 when unset or not a number >= 1)."""
    try:
        factor = float(os.environ.get("GREENROOM_TEST_SLOWNESS", "1"))
    except ValueError:
        return 1.0
    return factor if math.isfinite(factor) and factor >= 1 else 1.0


SLOWNESS = slowness()


def slow(seconds: float) -> float:
    """``seconds`` of real-clock waiting, scaled by ``GREENROOM_TEST_SLOWNESS``."""
    return seconds * SLOWNESS
