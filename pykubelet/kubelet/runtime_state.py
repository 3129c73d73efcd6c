"""Whether the container runtime is fit to sync pods (upstream ``runtimeState``).

``updateRuntimeUp`` asks the runtime for its status every 5 seconds and
records the answer here. The sync loop reads ``runtime_errors()`` before each
iteration: while it returns anything, the loop backs off instead of driving a
runtime that cannot answer. A runtime that stops answering is declared down
only after ``base_runtime_sync_threshold``, so one slow call does not stall
every pod. Extra health checks (PLEG's relist freshness) join the same list.
"""

from __future__ import annotations

import time
from collections.abc import Callable

HealthCheck = Callable[[], tuple[bool, str]]


class RuntimeState:
    def __init__(self, base_runtime_sync_threshold: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._threshold = base_runtime_sync_threshold
        self._clock = clock
        self._last_base_runtime_sync: float | None = None
        self._runtime_error: str | None = None
        self._network_error: str | None = None
        self._health_checks: list[tuple[str, HealthCheck]] = []

    def add_health_check(self, name: str, check: HealthCheck) -> None:
        self._health_checks.append((name, check))

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
        for name, check in self._health_checks:
            ok, message = check()
            if not ok:
                errors.append(f"{name} is not healthy: {message}")
        if self._runtime_error:
            errors.append(self._runtime_error)
        return errors

    def network_errors(self) -> list[str]:
        return [self._network_error] if self._network_error else []
