"""Client-side rate limiting, as upstream ``client-go/util/flowcontrol``'s token bucket.

Two parts of the kubelet throttle themselves with it: image pulls
(``registryPullQPS`` / ``registryBurst``, which refuse a pull over the limit)
and the API clients (``kubeAPIQPS`` / ``kubeAPIBurst`` and ``eventRecordQPS`` /
``eventBurst``, which wait for a token instead). The bucket holds at most
``burst`` tokens and refills at ``qps`` tokens a second, so a quiet client may
send ``burst`` requests at once and then ``qps`` a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up; ``qps <= 0`` means no limit."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()
        # Waiters queue behind one lock so that tokens go out in arrival order.
        self._waiting: asyncio.Lock | None = None

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_accept(self) -> bool:
        """Take a token if one is there; never waits."""
        if self.unlimited:
            return True
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def wait(self) -> float:
        """Take a token, waiting for one if the bucket is empty; returns the seconds waited."""
        if self.unlimited:
            return 0.0
        if self._waiting is None:
            self._waiting = asyncio.Lock()
        waited = 0.0
        async with self._waiting:
            while not self.try_accept():
                delay = (1 - self._tokens) / self.qps
                waited += delay
                await asyncio.sleep(delay)
        return waited


__all__ = ["TokenBucket"]
