"""The API clients' token bucket: bursts pass, then requests are paced at qps."""

from __future__ import annotations

import asyncio
import time

from pykubelet.util.flowcontrol import TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_refill_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=3, clock=clock)
    assert [bucket.try_accept() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5  # one token at 2 qps
    assert bucket.try_accept()
    assert not bucket.try_accept()


def test_zero_qps_never_limits() -> None:
    bucket = TokenBucket(qps=0, burst=1)
    assert all(bucket.try_accept() for _ in range(1000))


async def test_wait_paces_requests_beyond_the_burst() -> None:
    bucket = TokenBucket(qps=20, burst=2)
    started = time.monotonic()
    waits = await asyncio.gather(*(bucket.wait() for _ in range(6)))
    elapsed = time.monotonic() - started
    # Two go at once, the other four one every 50 ms.
    assert waits[:2] == [0.0, 0.0]
    assert 0.17 <= elapsed < 0.5
