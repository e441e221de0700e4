"""Fallback models: the next model of an agent's ``fallback`` list when one fails early.

A :class:`FallbackChain` is a provider over several models. A call tries them in order and moves
on when one fails with a model error *before any token reached the caller* (a failure after
that is reported: the client has already seen part of an answer). Each model keeps its own
retry policy, so a model is given up only after its provider's retries.

After a fallback answered, the chain starts from that model for ``cooldown`` seconds before it
tries the primary again (docker-agent's stickiness), so a rate-limited primary is not hammered
on every call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs
import trio

from greenroom.errors import GreenroomError, ModelError

from .providers._base import Delta, ModelConfig, ModelRequest, ModelResponse, OnDelta, Provider

log = logging.getLogger(__name__)


@attrs.define
class Stickiness:
    """Which model of a chain to start from, and until when (``trio.current_time()``)."""

    index: int = 0
    until: float = 0.0

    def start(self) -> int:
        if self.index and trio.current_time() >= self.until:
            self.index = 0
        return self.index


class FallbackChain:
    """A provider trying ``models`` in order (see the module docstring).

    Args:
        models: the primary model, then the fallbacks.
        provider_for: makes (or returns the cached) provider of a model; a model whose
            provider cannot be made counts as a failed model.
        cooldown: seconds to keep starting from a fallback that answered.
        sticky: the chain's state, shared by the chains of one agent.
        retries: retries per model for a retryable failure (the agent's ``fallback.retries``;
            -1: none; None: the provider's own policy).
    """

    def __init__(
        self,
        models: Sequence[ModelConfig],
        provider_for: Callable[[ModelConfig], Provider],
        *,
        cooldown: float,
        sticky: Stickiness,
        retries: int | None = None,
    ) -> None:
        self.models = tuple(models)
        self._provider_for = provider_for
        self._cooldown = cooldown
        self._sticky = sticky
        self._retries = retries

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """The first answer of the models, from the sticky one on.

        Raises:
            ModelError: the last model's error when every model failed before answering, or
                the error of a model that failed after some tokens were streamed.
        """
        # docker-agent: ``retries`` per model for retryable failures; with fallbacks a rate
        # limit moves on to the next model at once.
        request = attrs.evolve(
            request, retries=self._retries, retry_rate_limited=len(self.models) == 1
        )
        start = self._sticky.start()
        order = list(range(start, len(self.models))) + list(range(start))
        failure: GreenroomError | None = None
        for position in order:
            model = self.models[position]
            emitted = False

            async def forward(delta: Delta) -> None:
                nonlocal emitted
                emitted = True
                await on_delta(delta)

            try:
                provider = self._provider_for(model)
                response = await provider.complete(attrs.evolve(request, model=model), forward)
            except ModelError as exc:
                if emitted:
                    raise
                failure = exc
            except GreenroomError as exc:  # the provider could not be made (bad endpoint, ...)
                failure = exc
            else:
                self._stick(position)
                if response.answered_by is None:  # a router inside the chain names its own
                    response = attrs.evolve(response, answered_by=model)
                return response
            log.warning("model %s failed, trying the next one: %s", model.ref, failure.message)
        assert failure is not None
        if isinstance(failure, ModelError):
            raise failure
        raise ModelError(failure.message) from failure

    def _stick(self, position: int) -> None:
        if position == 0:
            self._sticky.index = 0
            return
        if position != self._sticky.index:
            self._sticky.until = trio.current_time() + self._cooldown
        self._sticky.index = position
