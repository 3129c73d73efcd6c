"""The desired state: every pod the sources want on this node (upstream ``pod.Manager``).

Pod sources describe what should run; this is where their merged view lives,
indexed by UID and by full name. Everything that needs "the pod spec for UID
x" (PLEG event handling, housekeeping, the ``/pods`` endpoint) asks here.
"""

from __future__ import annotations

from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_uid
from pykubelet.api.kubetypes import pod_full_name


class PodManager:
    def __init__(self) -> None:
        self._by_uid: dict[str, V1Pod] = {}

    def add_pod(self, pod: V1Pod) -> None:
        self._by_uid[pod_uid(pod)] = pod

    update_pod = add_pod

    def remove_pod(self, pod: V1Pod) -> None:
        self._by_uid.pop(pod_uid(pod), None)

    def get_pod_by_uid(self, uid: str) -> V1Pod | None:
        return self._by_uid.get(uid)

    def get_pod_by_full_name(self, full_name: str) -> V1Pod | None:
        return next((p for p in self._by_uid.values() if pod_full_name(p) == full_name), None)

    def get_pods(self) -> list[V1Pod]:
        return list(self._by_uid.values())

    def uids(self) -> set[str]:
        return set(self._by_uid)
