"""Supervised tasks: a crash is logged with its traceback, then restarted or fatal."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from pykubelet.util.supervisor import Supervisor
from tests.unit.waiting import ManualClock, settle


async def test_a_crashing_loop_is_logged_and_restarted_with_growing_back_off(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    supervisor = Supervisor(backoff_initial=1, backoff_max=4, sleep=clock.sleep)
    starts: list[float] = []

    async def flaky() -> None:
        starts.append(clock.now)
        if len(starts) <= 4:
            raise ValueError(f"crash {len(starts)}")
        await asyncio.Event().wait()  # the fifth run stays up

    supervisor.spawn("flaky-loop", flaky)
    await settle()
    assert starts == [clock.now]
    await clock.advance(20, step=0.5)
    assert len(starts) == 5
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps == [1, 2, 4, 4]  # doubling up to the maximum
    assert caplog.text.count("Task crashed; restarting it after back-off") == 4
    assert 'task="flaky-loop"' in caplog.text and "ValueError: crash 1" in caplog.text
    assert "Traceback" in caplog.text
    assert supervisor.names() == ["flaky-loop"]
    assert supervisor.fatal_error is None
    await supervisor.shutdown()
    assert supervisor.names() == []


async def test_a_fatal_task_that_crashes_stops_the_wait_with_its_error(
        caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor()
    side_loop_cancelled = asyncio.Event()

    async def side_loop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            side_loop_cancelled.set()

    async def sync_loop() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("sync loop bug")

    supervisor.spawn("side", side_loop)
    supervisor.spawn("sync-loop", sync_loop, restart=False)
    fatal = await asyncio.wait_for(supervisor.wait(asyncio.Event()), 2)
    assert fatal is not None and fatal.name == "sync-loop"
    assert str(fatal.cause) == "sync loop bug"
    assert "Task failed; stopping the kubelet" in caplog.text and "Traceback" in caplog.text
    await supervisor.shutdown()
    assert side_loop_cancelled.is_set()


async def test_wait_returns_none_when_stopping_and_shutdown_cancels_in_reverse() -> None:
    supervisor = Supervisor()
    order: list[str] = []

    def forever(name: str) -> Callable[[], Coroutine[Any, Any, None]]:
        async def run() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                order.append(name)
        return run

    supervisor.spawn("first", forever("first"))
    supervisor.spawn("second", forever("second"), restart=False)
    stopping = asyncio.Event()
    stopping.set()
    assert await supervisor.wait(stopping) is None
    await asyncio.sleep(0)
    await supervisor.shutdown()
    assert order == ["second", "first"]


async def test_a_task_that_finishes_is_not_restarted() -> None:
    clock = ManualClock()
    supervisor = Supervisor(backoff_initial=0.01, sleep=clock.sleep)
    runs = 0

    async def once() -> None:
        nonlocal runs
        runs += 1

    await supervisor.spawn("once", once)
    await clock.advance(1, step=0.01)
    assert runs == 1 and supervisor.names() == []
    await supervisor.shutdown()
