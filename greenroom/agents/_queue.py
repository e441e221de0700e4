"""A bounded FIFO of queued messages: ``put`` refuses instead of waiting when it is full."""

from __future__ import annotations

from collections import deque

from greenroom.errors import QueueFull

from ._runtime import QueuedMessage


class MessageQueue:
    """Steer or follow-up messages waiting for the runtime (sync, so atomic under trio)."""

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.name = name
        self.capacity = capacity
        self._items: deque[QueuedMessage] = deque()

    @property
    def depth(self) -> int:
        return len(self._items)

    def put(self, message: QueuedMessage) -> None:
        """Queue ``message``. Raises QueueFull when ``capacity`` messages are waiting."""
        if len(self._items) >= self.capacity:
            raise QueueFull(f"{self.name} queue full ({self.capacity} messages waiting)")
        self._items.append(message)

    def pop(self) -> QueuedMessage | None:
        return self._items.popleft() if self._items else None
