"""The one way tests and the harness wait for something outside them: poll until a deadline.

``wait_until(condition, timeout, what)`` calls ``condition`` every ``interval``
seconds until it returns a truthy value, and returns that value. After
``timeout`` seconds it raises ``WaitTimeout`` (an ``AssertionError``) naming
``what`` and the last value seen, or the last error when ``condition`` raised
one of the ``ignore``d exceptions (a file not written yet, an object not
created yet). Any other exception ends the wait at once, so a condition can
stop waiting that is pointless (the process under test exited) by raising.
``on_timeout`` adds diagnostics (a log tail) to the message.

``wait_until_async`` is the same for a test running in an event loop: it
sleeps with ``asyncio.sleep``, so the loop keeps running what the test waits
for, and ``condition`` may be a coroutine function.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL = 0.25


class WaitTimeout(AssertionError):
    """What was waited for did not come in time."""


class _Poll:
    """The deadline and the last value or error: what the timeout message reports."""

    def __init__(self, timeout: float, what: str, ignore: tuple[type[BaseException], ...],
                 on_timeout: Callable[[], str] | None) -> None:
        self.timeout = timeout
        self.what = what
        self.ignore = ignore
        self.on_timeout = on_timeout
        self.deadline = time.monotonic() + timeout
        self.last: Any = None
        self.last_error: BaseException | None = None

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def error(self) -> WaitTimeout:
        seen = (f"last error: {self.last_error!r}" if self.last_error is not None
                else f"last: {self.last!r}")
        extra = f"\n{self.on_timeout()}" if self.on_timeout is not None else ""
        return WaitTimeout(f"timed out after {self.timeout:g}s waiting for {self.what} "
                           f"({seen}){extra}")


def wait_until(condition: Callable[[], T], timeout: float, what: str, *,
               interval: float = DEFAULT_INTERVAL,
               ignore: tuple[type[BaseException], ...] = (),
               on_timeout: Callable[[], str] | None = None) -> T:
    """Poll ``condition`` until it is truthy (its value) or ``timeout`` passed (``WaitTimeout``)."""
    poll = _Poll(timeout, what, ignore, on_timeout)
    while True:
        try:
            poll.last = condition()
            poll.last_error = None
            if poll.last:
                return poll.last
        except ignore as err:
            poll.last_error = err
        if poll.expired():
            raise poll.error()
        time.sleep(interval)


async def wait_until_async(condition: Callable[[], T | Awaitable[T]], timeout: float, what: str,
                           *, interval: float = DEFAULT_INTERVAL,
                           ignore: tuple[type[BaseException], ...] = (),
                           on_timeout: Callable[[], str] | None = None) -> T:
    """``wait_until`` in an event loop; ``condition`` may return an awaitable."""
    poll = _Poll(timeout, what, ignore, on_timeout)
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            poll.last = value
            poll.last_error = None
            if poll.last:
                return poll.last
        except ignore as err:
            poll.last_error = err
        if poll.expired():
            raise poll.error()
        await asyncio.sleep(interval)


__all__ = ["DEFAULT_INTERVAL", "WaitTimeout", "wait_until", "wait_until_async"]
