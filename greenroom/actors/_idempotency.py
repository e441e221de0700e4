"""The ``Idempotency-Key`` cache of one session: a bounded FIFO set of keys."""

from __future__ import annotations

import collections

DEFAULT_SIZE = 256


class IdempotencyCache:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._keys: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._size = size

    def reserve(self, key: str) -> bool:
        """Record ``key``; False when it was already seen (a duplicate)."""
        if key in self._keys:
            return False
        self._keys[key] = None
        while len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return True

    def release(self, key: str) -> None:
        """Forget ``key`` (its delivery failed, so a retry must go through)."""
        self._keys.pop(key, None)

    def __len__(self) -> int:
        return len(self._keys)
