"""The latest probe verdict per container instance (upstream ``proberesults.Manager``).

There is one ``ResultsManager`` per probe type. Probe workers write into it;
two kinds of readers consume it. The runtime manager asks ``get`` during a
pod sync (``kuberuntime.actions.ProbeResults``) to decide whether a container
failed its liveness or startup probe, and the kubelet drains ``updates()`` to
resync a pod as soon as a verdict changes instead of waiting for the next
periodic sync. Results are keyed by the container *instance* id, so a
restarted container never inherits the verdict of its predecessor.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_uid
from pykubelet.container import ContainerID, ProbeResult


@dataclass(frozen=True)
class ResultUpdate:
    """A change of one container's verdict, published on ``ResultsManager.updates()``."""

    container_id: ContainerID
    result: ProbeResult
    pod_uid: str


class ResultsManager:
    """A cache of verdicts by container id plus a queue of the changes.

    Everything runs on the event loop, so no lock is needed. The queue is
    unbounded because ``set`` is called from synchronous code and must never
    block a probe worker; changes are rare (only transitions are published).
    """

    def __init__(self) -> None:
        self._cache: dict[ContainerID, ProbeResult] = {}
        self._updates: asyncio.Queue[ResultUpdate] = asyncio.Queue()

    def get(self, container_id: ContainerID) -> ProbeResult | None:
        return self._cache.get(container_id)

    def set(self, container_id: ContainerID, result: ProbeResult, pod: V1Pod) -> None:
        if self._cache.get(container_id) == result:
            return
        self._cache[container_id] = result
        self._updates.put_nowait(ResultUpdate(container_id, result, pod_uid(pod)))

    def remove(self, container_id: ContainerID) -> None:
        # Removal is not a verdict: nobody has to resync for it.
        self._cache.pop(container_id, None)

    def updates(self) -> asyncio.Queue[ResultUpdate]:
        return self._updates
