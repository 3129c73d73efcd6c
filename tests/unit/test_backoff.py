"""Back-off: doubling, capping, healing after quiet time, reset and gc."""

from __future__ import annotations

import pytest

from pykubelet.util.backoff import Backoff


class StepClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


def test_unknown_key_has_no_delay_and_is_not_in_backoff(clock: StepClock) -> None:
    backoff = Backoff(10, 300, clock)
    assert backoff.get("k") == 0
    assert not backoff.is_in_backoff_since("k", clock.now)
    assert not backoff.is_in_backoff_since_update("k")


def test_delay_starts_at_initial_doubles_and_caps_at_maximum(clock: StepClock) -> None:
    backoff = Backoff(10, 300, clock)
    seen = []
    for _ in range(7):
        backoff.next("k")
        seen.append(backoff.get("k"))
        clock.now += 1
    assert seen == [10, 20, 40, 80, 160, 300, 300]


def test_keys_are_independent(clock: StepClock) -> None:
    backoff = Backoff(10, 300, clock)
    backoff.next("a")
    backoff.next("a")
    backoff.next("b")
    assert (backoff.get("a"), backoff.get("b")) == (20, 10)


def test_in_backoff_since_a_finish_time_until_the_delay_passed(clock: StepClock) -> None:
    backoff = Backoff(10, 300, clock)
    finished = clock.now
    backoff.next("k")
    clock.now = finished + 9.5
    assert backoff.is_in_backoff_since("k", finished)
    clock.now = finished + 10.5
    assert not backoff.is_in_backoff_since("k", finished)


def test_in_backoff_since_update_counts_from_the_last_failure(clock: StepClock) -> None:
    backoff = Backoff(10, 300, clock)
    backoff.next("k")
    clock.now += 5
    backoff.next("k")  # delay 20 from here
    clock.now += 19
    assert backoff.is_in_backoff_since_update("k")
    clock.now += 2
    assert not backoff.is_in_backoff_since_update("k")


def test_reset_forgets_the_history(clock: StepClock) -> None:
    backoff = Backoff(10, 300, clock)
    for _ in range(3):
        backoff.next("k")
    backoff.reset("k")
    assert backoff.get("k") == 0
    backoff.next("k")
    assert backoff.get("k") == 10


def test_quiet_for_twice_the_maximum_starts_over(clock: StepClock) -> None:
    backoff = Backoff(10, 100, clock)
    for _ in range(4):
        backoff.next("k")
    assert backoff.get("k") == 80
    clock.now += 201
    backoff.next("k")
    assert backoff.get("k") == 10


def test_gc_drops_only_stale_entries(clock: StepClock) -> None:
    backoff = Backoff(10, 100, clock)
    backoff.next("old")
    clock.now += 150
    backoff.next("recent")
    clock.now += 60
    backoff.gc()
    assert "old" not in backoff
    assert "recent" in backoff
