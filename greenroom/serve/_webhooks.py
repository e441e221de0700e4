"""The webhook deliverer (issue 25, decision 0027): a task in the server's nursery that sends the
outbox's deliveries, at least once, signed.

Each round it claims due deliveries (a lease under its claimer name: on a PostgreSQL cluster
``FOR UPDATE SKIP LOCKED``, so nodes never take one row together) and makes one attempt of
each in a task of its own: ``POST`` the stored body with ``Greenroom-Delivery`` (the delivery
id, the same on every attempt: receivers de-duplicate by it), ``Greenroom-Event`` and
``Greenroom-Signature``
(``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under --webhook-secret>``); redirects
are not followed and the URL is checked against the allow-list again. A 2xx answer marks it
delivered; anything else is retried after ``base_delay * 2**(n-1)`` seconds (at most
``max_delay``) until ``max_attempts``, then it is failed with its last error (the run record
shows it). Every attempt is recorded and its claim given up, with the time the next one is
due; the deliverer wakes then and claims it again (or another node does, or the server after
a restart), so a receiver that keeps failing holds no slot while it waits. A webhook never
blocks a turn: the run's end only writes the row.

httpx is imported when the first delivery is sent (light start).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from greenroom import __version__
from greenroom.domain import WebhookPrefix, check_webhook
from greenroom.errors import GreenroomError
from greenroom.observe import metrics
from greenroom.persistence import Delivery, DeliveryState, RunLog

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("greenroom.webhooks")

SIGNATURE_HEADER = "Greenroom-Signature"
DELIVERY_HEADER = "Greenroom-Delivery"
EVENT_HEADER = "Greenroom-Event"


@attrs.frozen
class WebhookPolicy:
    max_attempts: int = 12  # then the delivery is failed (about 18 minutes of retries)
    base_delay: float = 1.0  # seconds before the 2nd attempt; doubling each time
    max_delay: float = 300.0  # the cap of one wait between attempts
    timeout: float = 10.0  # one attempt, connection to answer
    lease: float = 60.0  # a claim outlives its attempt's timeout by this much (a dead node's)
    poll: float = 5.0  # seconds between looks at the outbox (other nodes' rows, retries)
    concurrency: int = 16  # deliveries in flight at once

    def delay(self, attempts: int) -> float:
        """The wait after the ``attempts``-th failed attempt."""
        return float(min(self.max_delay, self.base_delay * 2 ** max(0, attempts - 1)))


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Greenroom-Signature`` value of ``body`` sent at ``timestamp``."""
    message = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class Deliverer:
    """Sends the outbox of ``run_log`` (see the module docstring); ``run`` it in a nursery.

    ``clock`` is what due times and claims are measured on (the wall clock; a test passes
    trio's), ``wall`` what the signature's timestamp says. ``single_node``: this process owns
    the store alone, so every claim left in it is a dead process's, freed at start."""

    def __init__(
        self,
        run_log: RunLog,
        allow: tuple[WebhookPrefix, ...],
        secret: str,
        policy: WebhookPolicy | None = None,
        *,
        single_node: bool = True,
        clock: Callable[[], float] = time.time,
        wall: Callable[[], float] = time.time,
        name: str = "",
    ) -> None:
        self._log = run_log
        self._allow = allow
        self._secret = secret
        self.policy = policy or WebhookPolicy()
        self._single_node = single_node
        self._clock = clock
        self._wall = wall
        # This process's claims: a restarted node (same name) never takes its old ones for its own.
        self.claimer = f"{name}:{uuid.uuid4().hex[:16]}" if name else uuid.uuid4().hex
        self._in_flight = 0
        self._nudge = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._client: httpx.AsyncClient | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if self._single_node:
            freed = await self._log.release_claims()
            if freed:
                log.info("webhooks: %d deliveries a stopped server had claimed go on", freed)
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._watch_outbox)
                while True:
                    self._nudge = trio.Event()
                    await self._claim_round(nursery)
                    with trio.move_on_after(self.policy.poll):
                        await self._nudge.wait()
        finally:
            if self._client is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await self._client.aclose()

    async def _watch_outbox(self) -> None:
        while True:
            await self._log.outbox_written().wait()
            self._nudge.set()

    async def _claim_round(self, nursery: trio.Nursery) -> None:
        room = self.policy.concurrency - self._in_flight
        if room <= 0:
            return
        policy = self.policy
        try:
            claimed = await self._log.claim_deliveries(
                self.claimer, self._clock(), policy.timeout + policy.lease, room
            )
        except GreenroomError as exc:
            log.warning("webhooks: claiming deliveries failed: %s", exc.message)
            return
        for delivery in claimed:
            self._in_flight += 1
            nursery.start_soon(self._deliver, delivery)

    async def _deliver(self, delivery: Delivery) -> None:
        """One attempt, recorded; a failure that may be retried wakes the loop when due."""
        try:
            error, final = await self._attempt(delivery)
            attempts = delivery.attempts + 1
            now = self._clock()
            if not error:
                metrics().webhook_attempts.labels("delivered").inc()
                await self._record(delivery, "delivered", attempts, "", now)
            elif final or attempts >= self.policy.max_attempts:
                log.warning(
                    "webhook %s of run %s failed after %d attempts: %s",
                    delivery.delivery_id,
                    delivery.run_id,
                    attempts,
                    error,
                )
                metrics().webhook_attempts.labels("failed").inc()
                await self._record(delivery, "failed", attempts, error, now)
            else:
                metrics().webhook_attempts.labels("retry").inc()
                wait = self.policy.delay(attempts)
                if await self._record(delivery, "pending", attempts, error, now, now + wait):
                    assert self._nursery is not None
                    self._nursery.start_soon(self._wake_after, wait)
        finally:
            self._in_flight -= 1
            self._nudge.set()

    async def _wake_after(self, seconds: float) -> None:
        await trio.sleep(seconds)
        self._nudge.set()

    async def _record(
        self,
        delivery: Delivery,
        state: DeliveryState,
        attempts: int,
        error: str,
        now: float,
        due: float = 0.0,
    ) -> bool:
        try:
            return await self._log.record_attempt(
                delivery.delivery_id,
                self.claimer,
                state,
                attempts,
                error,
                now,
                due or now,
            )
        except GreenroomError as exc:  # the claim runs out; the delivery is sent again later
            log.warning("webhooks: recording delivery %s failed: %s", delivery.delivery_id, exc)
            return False

    async def _attempt(self, delivery: Delivery) -> tuple[str, bool]:
        """One POST: ("", _) when delivered, else (why, whether to give up now)."""
        try:
            url = check_webhook(delivery.url, self._allow)
        except GreenroomError:
            return "the URL is no longer allowed (--webhook-allow)", True
        client = self._http()
        timestamp = int(self._wall())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"greenroom/{__version__} webhook",
            DELIVERY_HEADER: delivery.delivery_id,
            EVENT_HEADER: "run.ended",
            SIGNATURE_HEADER: sign(self._secret, timestamp, delivery.body),
        }
        import httpx

        try:
            with trio.fail_after(self.policy.timeout):
                # Streamed: the answer's body is never read (a receiver cannot flood us).
                async with client.stream(
                    "POST", url, content=delivery.body, headers=headers
                ) as response:
                    status = response.status_code
        except trio.TooSlowError:
            return f"no answer within {self.policy.timeout:g} s", False
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__, False
        if 200 <= status < 300:
            return "", False
        return f"HTTP {status}", False

    def _http(self) -> Any:
        if self._client is None:
            import httpx  # lazily: only a server that sends webhooks loads it

            self._client = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,  # no proxy from the environment: the allow-list is the rule
                timeout=self.policy.timeout,
                limits=httpx.Limits(max_connections=self.policy.concurrency),
            )
        return self._client


__all__ = ["Deliverer", "WebhookPolicy", "sign"]
