"""Whether the container runtime is fit to sync pods (upstream ``runtimeState``).

``updateRuntimeUp`` asks the runtime for its status every 5 seconds and
records the answer here. The sync loop reads ``runtime_errors()`` before each
iteration: while it returns anything, the loop backs off instead of driving a
runtime that cannot answer. A runtime that stops answering is declared down
only after ``base_runtime_sync_threshold``, so one slow call does not stall
every pod. Extra health checks (PLEG's relist freshness) join the same list.

Right after start-up the first status call and the first relist are still on
their way, so the loop skips its first iterations for reasons that are
expected, not faults: ``starting_up()`` tells those apart (nothing has
failed that ever worked, and the threshold since start has not passed), so
the loop can say so at info level instead of as an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

HealthCheck = Callable[[], tuple[bool, str]]


class RuntimeState:
    def __init__(self, *, base_runtime_sync_threshold: float = 30.0,
                 health_checks: Sequence[tuple[str, HealthCheck]] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._threshold = base_runtime_sync_threshold
        self._clock = clock
        self._last_base_runtime_sync: float | None = None
        self._runtime_error: str | None = None
        self._network_error: str | None = None
        # Named checks whose failures are runtime errors (upstream's PLEG check).
        self._health_checks = list(health_checks)
        self._started = clock()
        # Health checks that have passed at least once: a failure after that is a fault.
        self._healthy_once: set[str] = set()

    def set_runtime_sync(self) -> None:
        self._last_base_runtime_sync = self._clock()

    def set_runtime_error(self, error: str | None) -> None:
        self._runtime_error = error

    def set_network_error(self, error: str | None) -> None:
        self._network_error = error

    def runtime_errors(self) -> list[str]:
        errors: list[str] = []
        if self._last_base_runtime_sync is None:
            errors.append("container runtime status check may not have completed yet")
        elif self._clock() - self._last_base_runtime_sync > self._threshold:
            errors.append("container runtime is down")
        errors.extend(f"{name} is not healthy: {message}"
                      for name, message in self._failing_checks())
        if self._runtime_error:
            errors.append(self._runtime_error)
        return errors

    def starting_up(self) -> bool:
        """Whether every current error is a first check that has not completed yet.

        True only within the sync threshold after start: a runtime that never
        answers is a fault, reported as one after that.
        """
        now = self._clock()
        if now - self._started > self._threshold or self._runtime_error:
            return False
        if (self._last_base_runtime_sync is not None
                and now - self._last_base_runtime_sync > self._threshold):
            return False
        return all(name not in self._healthy_once for name, _ in self._failing_checks())

    def _failing_checks(self) -> list[tuple[str, str]]:
        failing: list[tuple[str, str]] = []
        for name, check in self._health_checks:
            ok, message = check()
            if ok:
                self._healthy_once.add(name)
            else:
                failing.append((name, message))
        return failing

    def network_errors(self) -> list[str]:
        return [self._network_error] if self._network_error else []
