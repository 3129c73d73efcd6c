"""Per-key exponential back-off, as upstream ``client-go/util/flowcontrol.Backoff``.

The kubelet throttles two things with it: restarting a crashing container
(CrashLoopBackOff, one key per pod container and spec hash) and pulling an
image that failed (ImagePullBackOff, key ``<podUID>_<image>``). Each failure
calls ``next`` (the delay starts at ``initial`` and doubles up to ``maximum``);
the caller asks ``is_in_backoff_since*`` before trying again. An entry left
alone for twice ``maximum`` counts as healed: the next failure starts over at
``initial``, and ``gc`` forgets it.

Times are seconds on a monotonic clock (injectable so tests can step time).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Entry:
    backoff: float
    last_update: float


class Backoff:
    def __init__(self, initial: float, maximum: float,
                 clock: Callable[[], float] = time.monotonic,
                 max_jitter_factor: float = 0.0) -> None:
        if initial < 0 or maximum < 0:
            raise ValueError("back-off durations must not be negative")
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self.max_jitter_factor = max_jitter_factor
        self._entries: dict[str, _Entry] = {}
        # The prober, the pod workers and the image puller may share one instance from threads.
        self._lock = threading.Lock()

    def _jitter(self, delay: float) -> float:
        if self.max_jitter_factor <= 0:
            return 0.0
        return random.random() * self.max_jitter_factor * delay

    def _expired(self, event_time: float, entry: _Entry) -> bool:
        # Stable for twice the maximum delay: the failure history no longer matters.
        return event_time - entry.last_update > 2 * self.maximum

    def next(self, key: str, now: float | None = None) -> None:
        """Record a failure of ``key`` at ``now``: start at ``initial`` or double, capped."""
        event_time = self.clock() if now is None else now
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(event_time, entry):
                entry = _Entry(self.initial + self._jitter(self.initial), 0.0)
                self._entries[key] = entry
            else:
                delay = entry.backoff * 2 + self._jitter(entry.backoff)
                entry.backoff = min(delay, self.maximum)
            entry.last_update = self.clock()

    def get(self, key: str) -> float:
        """The current delay of ``key``; 0 when it has no failures on record."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.backoff if entry is not None else 0.0

    def is_in_backoff_since(self, key: str, since: float) -> bool:
        """True while less than the current delay has passed since ``since`` (a finish time)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(since, entry):
                return False
            return self.clock() - since < entry.backoff

    def is_in_backoff_since_update(self, key: str, event_time: float | None = None) -> bool:
        """True while ``event_time`` is less than the current delay after the last failure."""
        moment = self.clock() if event_time is None else event_time
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(moment, entry):
                return False
            return moment - entry.last_update < entry.backoff

    def reset(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def gc(self) -> None:
        """Forget keys that have been quiet for more than twice the maximum delay."""
        now = self.clock()
        with self._lock:
            stale = [k for k, e in self._entries.items() if self._expired(now, e)]
            for key in stale:
                del self._entries[key]

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._entries

    def size(self) -> int:
        """Keys on record (not ``__len__``: an empty back-off must stay truthy)."""
        with self._lock:
            return len(self._entries)


__all__ = ["Backoff"]
