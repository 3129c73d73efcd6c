"""Pod workers (upstream ``pkg/kubelet/pod_workers.go``).

One serialised asyncio worker per pod UID drives the pod through syncing,
terminating and terminated, and the ``PodWorkers`` object is the kubelet's
source of truth for whether a pod may still have running containers. The
kubelet implements ``PodSyncer``; see ``workers`` for the contract.
"""

from pykubelet.podworkers.workers import (
    KillPodOptions,
    PodStatusFunc,
    PodSyncer,
    PodWorkers,
    PodWorkerState,
    PodWorkerSync,
    UpdatePodOptions,
    WorkQueue,
    is_static_pod,
    jitter,
)

__all__ = [
    "KillPodOptions",
    "PodStatusFunc",
    "PodSyncer",
    "PodWorkerState",
    "PodWorkerSync",
    "PodWorkers",
    "UpdatePodOptions",
    "WorkQueue",
    "is_static_pod",
    "jitter",
]
