"""Why each container last failed to start, per pod (upstream ``reason_cache.go``).

A container that could not be started (image pull failure, crash-loop
back-off, bad config...) has no runtime instance that says so: the failure is
only known to the pod sync that hit it. The status generator needs that
reason long after the sync returned, to show ``waiting: {reason:
CrashLoopBackOff}`` instead of a bland default. This cache keeps the last
start failure per (pod UID, container name), forgets it once the container
starts, and stays bounded like upstream (least recently used entries go first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from pykubelet.container import START_CONTAINER, PodSyncResult

DEFAULT_CAPACITY = 1000


@dataclass(frozen=True)
class ReasonInfo:
    """A start failure: ``reason`` is the short CamelCase word shown as the waiting reason."""

    reason: str
    message: str = ""


class ReasonCache:
    """An LRU map of (pod UID, container name) to that container's last start failure."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity <= 0:
            raise ValueError(f"reason cache capacity must be positive, got {capacity}")
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, str], ReasonInfo] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def update(self, uid: str, result: PodSyncResult) -> None:
        """Record the container-start outcomes of one pod sync: failures in, successes out."""
        for action in result.results:
            if action.action != START_CONTAINER:
                continue
            if action.error is not None:
                reason = action.reason or type(action.error).__name__
                self.add(uid, action.target, reason, action.message or str(action.error))
            else:
                self.remove(uid, action.target)

    def add(self, uid: str, container_name: str, reason: str, message: str = "") -> None:
        key = (uid, container_name)
        self._entries[key] = ReasonInfo(reason, message)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def remove(self, uid: str, container_name: str) -> None:
        self._entries.pop((uid, container_name), None)

    def get(self, uid: str, container_name: str) -> ReasonInfo | None:
        key = (uid, container_name)
        info = self._entries.get(key)
        if info is not None:
            self._entries.move_to_end(key)
        return info

    def forget_pod(self, uid: str) -> None:
        """Drop every entry of a pod that is gone, so a reused name starts clean."""
        for key in [k for k in self._entries if k[0] == uid]:
            del self._entries[key]
