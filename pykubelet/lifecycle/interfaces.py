"""What internal modules may ask of a pod between its syncs (upstream ``lifecycle/interfaces.go``).

Two questions, each asked of every registered handler:

- ``PodSyncLoopHandler.should_sync``: asked by the sync loop's periodic tick
  (every second) for each pod the kubelet runs; a True answer syncs that pod
  now, even though no event and no resync is due for it.
- ``PodSyncHandler.should_evict``: asked whenever a pod's API status is
  generated; an answer with ``evict`` set makes the pod Failed with that
  reason and message, after which its pod worker terminates it (containers
  stopped within their grace period, never restarted).

The admission question (``PodAdmitHandler``), which upstream keeps beside
these, is in ``admission.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kubernetes_asyncio.client import V1Pod


@dataclass(frozen=True)
class ShouldEvictResponse:
    """A handler's verdict on a pod: keep it, or fail it with this reason and message."""

    evict: bool
    reason: str = ""
    message: str = ""


KEEP = ShouldEvictResponse(evict=False)


class PodSyncLoopHandler(Protocol):
    def should_sync(self, pod: V1Pod) -> bool: ...


class PodSyncHandler(Protocol):
    def should_evict(self, pod: V1Pod) -> ShouldEvictResponse: ...


__all__ = ["KEEP", "PodSyncHandler", "PodSyncLoopHandler", "ShouldEvictResponse"]
