"""Waiting in unit tests on what happened, never on how long it took.

``until`` waits for a condition, with a deadline far beyond any machine's
slowness: a test fails on it only when the condition never comes. ``settle``
lets every ready task run until it blocks again, for asserting that something
(wrongly) does not happen; it counts event-loop passes, not seconds, so it
suits code that waits on queues, events and injected clocks, not on sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

UNTIL_TIMEOUT = 10.0
SETTLE_ROUNDS = 50
EPSILON = 1e-9  # a deadline this close counts as reached: sums of 0.1 s steps are inexact


async def until(condition: Callable[[], object], *, timeout: float = UNTIL_TIMEOUT,
                what: str = "condition") -> None:
    """Return once ``condition()`` is truthy; fail after ``timeout`` seconds saying ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    rounds = 0
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g}s")
        rounds += 1
        # Pass the loop a few times first (in-memory fakes need no more), then
        # stop spinning so that I/O and threads get the CPU.
        await asyncio.sleep(0 if rounds < SETTLE_ROUNDS else 0.001)


async def settle(rounds: int = SETTLE_ROUNDS) -> None:
    """Let ready tasks run ``rounds`` event-loop passes."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class ManualClock:
    """A monotonic clock and its ``sleep`` that move only when the test ``advance``s them.

    A sleeper wakes when the clock passes its deadline; ``advance`` then lets
    the woken tasks run (``settle``) before it returns.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        await future

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting (cancelled ones not counted)."""
        return sum(1 for _, future in self._sleepers if not future.done())

    async def advance(self, seconds: float, *, step: float | None = None) -> None:
        """Move the clock by ``seconds`` (in ``step``s, waking sleepers at each) and settle."""
        target = self.now + seconds
        step = step or seconds
        while True:
            self.now = min(target, self.now + step)
            await self._wake_due()
            if self.now >= target:
                return

    async def _wake_due(self) -> None:
        # A woken task may sleep again at once; repeat until nobody is due.
        while True:
            now = self.now + EPSILON
            due = [(at, f) for at, f in self._sleepers if at <= now]
            self._sleepers = [(at, f) for at, f in self._sleepers if at > now and not f.done()]
            for _, future in due:
                if not future.done():
                    future.set_result(None)
            await settle()
            if not any(at <= self.now + EPSILON for at, _ in self._sleepers):
                return
