"""How long pods take to start (upstream ``util.PodStartupLatencyTracker``).

Three histograms describe pod start-up, each from a different starting line:

* ``kubelet_pod_start_duration_seconds``: from the kubelet first seeing the
  pod (the ``kubernetes.io/config.seen`` annotation) to its first Running
  status;
* ``kubelet_pod_start_total_duration_seconds``: from the pod's creation
  timestamp to that moment;
* ``kubelet_pod_start_sli_duration_seconds``: the same, minus the time spent
  pulling images, which the SLI excludes because registries are outside the
  kubelet's control.

The image manager reports pulls, the kubelet reports status transitions; a
pod is observed once, the first time it becomes Running.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pykubelet.metrics import (
    POD_START_DURATION,
    POD_START_SLI_DURATION,
    POD_START_TOTAL_DURATION,
)


@dataclass
class _PodState:
    pulling_started: float = 0.0  # wall clock of the first pull that began
    pulling_finished: float = 0.0  # wall clock of the last pull that ended
    observed: bool = False


class PodStartupLatencyTracker:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._pods: dict[str, _PodState] = {}
        self._first_network_pod_seen = False

    def record_image_started_pulling(self, uid: str) -> None:
        state = self._pods.setdefault(uid, _PodState())
        if not state.pulling_started:
            state.pulling_started = self._clock()

    def record_image_finished_pulling(self, uid: str) -> None:
        state = self._pods.setdefault(uid, _PodState())
        state.pulling_finished = self._clock()

    def record_running(self, uid: str, first_seen: datetime | None,
                       created: datetime | None, host_network: bool) -> None:
        """The pod was reported Running for the first time."""
        state = self._pods.setdefault(uid, _PodState())
        if state.observed:
            return
        state.observed = True
        now = self._clock()
        if first_seen is not None:
            POD_START_DURATION.observe(max(0.0, now - first_seen.timestamp()))
        if created is None:
            return
        total = max(0.0, now - created.timestamp())
        pulling = 0.0
        if state.pulling_started and state.pulling_finished >= state.pulling_started:
            pulling = state.pulling_finished - state.pulling_started
        first_with_network = "false"
        if not host_network and not self._first_network_pod_seen:
            self._first_network_pod_seen = True
            first_with_network = "true"
        POD_START_TOTAL_DURATION.labels(first_with_network).observe(total)
        POD_START_SLI_DURATION.labels(first_with_network).observe(max(0.0, total - pulling))

    def delete(self, uid: str) -> None:
        self._pods.pop(uid, None)


POD_STARTUP_TRACKER = PodStartupLatencyTracker()

__all__ = ["POD_STARTUP_TRACKER", "PodStartupLatencyTracker"]
