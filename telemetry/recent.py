"""Per-process memory of recent reads, each kept at most a fixed number of seconds. Pure.

The hot paths read rows that change rarely (the effective policy, the model catalogue) on every
request; each process keeps a read for `seconds`, so a change made anywhere applies within that
long on every process, and at once in the process that made it (its owner calls `clear`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class _Entry(Generic[V]):
    value: V
    at: float


class Recent(Generic[K, V]):
    """Values by key, each valid for `seconds` after `put` by the caller's clock."""

    def __init__(self, seconds: float, *, entries: int = 10_000) -> None:
        self.seconds = seconds
        self.entries = entries  # past this many keys, start afresh
        self._lock = threading.Lock()
        self._items: dict[K, _Entry[V]] = {}

    def get(self, key: K, now: float) -> V | None:
        """The value put under `key` less than `seconds` ago, else None (a clock that went
        backwards counts as expired)."""
        entry = self._items.get(key)
        if entry is None or now - entry.at >= self.seconds or now < entry.at:
            return None
        return entry.value

    def put(self, key: K, value: V, now: float) -> None:
        with self._lock:
            if len(self._items) >= self.entries:
                self._items.clear()
            self._items[key] = _Entry(value, now)

    def discard(self, key: K) -> None:
        """Forget the value under `key`, if any."""
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
