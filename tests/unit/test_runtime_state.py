"""Whether the runtime may be synced, and whether its errors are just start-up."""

from __future__ import annotations

from pykubelet.kubelet.runtime_state import RuntimeState


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Pleg:
    """A PLEG health check: not yet successful until the first relist."""

    def __init__(self) -> None:
        self.ok = False

    def healthy(self) -> tuple[bool, str]:
        return (True, "") if self.ok else (False, "pleg has yet to be successful")


def make() -> tuple[RuntimeState, Clock, Pleg]:
    clock, pleg = Clock(), Pleg()
    state = RuntimeState(base_runtime_sync_threshold=30.0, health_checks=[("PLEG", pleg.healthy)],
                         clock=clock)
    return state, clock, pleg


def test_first_checks_under_way_are_start_up_not_faults() -> None:
    state, clock, pleg = make()
    assert state.runtime_errors() == [
        "container runtime status check may not have completed yet",
        "PLEG is not healthy: pleg has yet to be successful"]
    assert state.starting_up()
    state.set_runtime_sync()
    clock.now += 1
    assert state.runtime_errors() == ["PLEG is not healthy: pleg has yet to be successful"]
    assert state.starting_up()
    pleg.ok = True
    assert state.runtime_errors() == []


def test_a_check_failing_after_it_once_passed_is_a_fault() -> None:
    state, clock, pleg = make()
    state.set_runtime_sync()
    pleg.ok = True
    assert state.runtime_errors() == []
    pleg.ok = False
    clock.now += 1
    assert state.runtime_errors() == ["PLEG is not healthy: pleg has yet to be successful"]
    assert not state.starting_up()


def test_a_runtime_that_never_answers_is_a_fault_after_the_threshold() -> None:
    state, clock, _ = make()
    clock.now += 29
    assert state.starting_up()
    clock.now += 2
    assert state.runtime_errors()
    assert not state.starting_up()


def test_a_runtime_reporting_not_ready_is_a_fault_at_once() -> None:
    state, _, _ = make()
    state.set_runtime_error("container runtime not ready: NotReady: cni config not loaded")
    assert not state.starting_up()
