"""Our retry policy for model calls: bounded attempts with capped exponential backoff.

The SDK clients are built with ``max_retries=0`` so this is the only retry loop. An attempt
signals a failure worth retrying (HTTP 429, 5xx, a connection error before anything reached the
caller) by raising :class:`Retryable` around the error to report once the attempts run out.
Backoff sleeps are ``trio.sleep``: the caller's deadline cancels them like any other wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import httpx2
import trio

from greenroom.errors import (
    ModelContextOverflow,
    ModelError,
    ModelRateLimited,
    ModelStreamMalformed,
    ModelTimeout,
)

from ._overflow import is_context_overflow

T = TypeVar("T")


@attrs.frozen
class Backoff:
    """``attempts`` tries in all; before retry ``n`` (from 0) wait ``base * 2**n``, capped."""

    attempts: int = 3
    base: float = 0.5
    cap: float = 8.0
    retry_rate_limited: bool = True
    """False: a rate limit fails at once (a fallback model is tried instead)."""

    def delay(self, retry: int) -> float:
        return min(self.cap, self.base * 2.0**retry)


DEFAULT_BACKOFF = Backoff()


def for_request(backoff: Backoff, retries: int | None, retry_rate_limited: bool) -> Backoff:
    """``backoff`` with a request's overrides (an agent's ``fallback.retries``; -1: none)."""
    if retries is None and retry_rate_limited:
        return backoff
    attempts = backoff.attempts if retries is None else 1 + max(retries, 0)
    return attrs.evolve(backoff, attempts=attempts, retry_rate_limited=retry_rate_limited)


class Retryable(Exception):
    """Raised by an attempt whose failure may pass; ``error`` is what to report if it doesn't."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


async def with_retries(backoff: Backoff, attempt: Callable[[], Awaitable[T]]) -> T:
    """Run ``attempt`` until it succeeds, raises a non-retryable error or the attempts run out.

    Raises:
        ModelError: the last attempt's error, its message noting how many attempts were made.
    """
    retry = 0
    while True:
        try:
            return await attempt()
        except Retryable as failure:
            limited = isinstance(failure.error, ModelRateLimited)
            if limited and not backoff.retry_rate_limited:
                raise failure.error from failure.__cause__
            if retry + 1 >= backoff.attempts:
                error = failure.error
                tries = f"{retry + 1} attempt" + ("s" if retry else "")
                raise type(error)(f"{error.message} (gave up after {tries})") from failure.__cause__
        await trio.sleep(backoff.delay(retry))
        retry += 1


def status_failure(
    ref: str,
    status: int,
    detail: str,
    *,
    key_var: str,
    emitted: bool = False,
    rate_limited: bool = False,
    overloaded: bool = False,
) -> ModelError | Retryable:
    """Our error for an HTTP error status (or an error event of the same meaning mid-stream).

    429 (or ``rate_limited``) and 5xx (or ``overloaded``) are retryable unless something has
    already reached the caller; 401/403 name the key variable to check.
    """
    error: ModelError
    if is_context_overflow(status, detail):
        return ModelContextOverflow(f"{ref}: context window exceeded (HTTP {status}): {detail}")
    if status == 429 or rate_limited:
        error = ModelRateLimited(f"{ref}: rate-limited (HTTP {status}): {detail}")
    elif status >= 500 or overloaded:
        error = ModelError(f"{ref}: server error (HTTP {status}): {detail}")
    elif status in (401, 403):
        return ModelError(
            f"{ref}: the endpoint refused the API key (HTTP {status}); check {key_var}: {detail}"
        )
    else:
        return ModelError(f"{ref}: request refused (HTTP {status}): {detail}")
    return error if emitted else Retryable(error)


def connection_failure(
    ref: str, url: str, cause: str, *, timed_out: bool, started: bool, emitted: bool
) -> ModelError | Retryable:
    """Our error for a failed or cut connection; retryable unless something reached the caller.

    Before the response arrived it is a ModelError (ModelTimeout for an SDK timeout); once the
    stream started, a cut stream is a ModelStreamMalformed.
    """
    error: ModelError
    if timed_out:
        error = ModelTimeout(f"{ref}: {url} timed out: {cause}")
    elif started:
        error = ModelStreamMalformed(f"{ref}: the stream was cut: {cause}")
    else:
        error = ModelError(f"{ref}: cannot reach {url}: {cause}")
    return error if emitted else Retryable(error)


def transport_failure(
    exc: httpx2.TransportError, ref: str, base_url: str, *, emitted: bool
) -> ModelError | Retryable:
    """Our error for a connection that broke under the SDK (the request had been sent)."""
    return connection_failure(
        ref,
        base_url,
        repr(exc),
        timed_out=isinstance(exc, httpx2.TimeoutException),
        started=True,
        emitted=emitted,
    )
