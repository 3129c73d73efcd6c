"""``spec.activeDeadlineSeconds`` enforced on the node (upstream ``active_deadline.go``).

A pod may say how long it may stay active on a node. The time counts from
the pod's ``status.startTime``, which the status manager records at the
pod's first sync (a pod with no start time yet has used none of its
deadline). Once ``now - startTime >= activeDeadlineSeconds`` the pod is
failed: phase Failed, reason ``DeadlineExceeded``, message ``Pod was active
on the node longer than the specified deadline``, and a Normal event with
the same reason and message on the pod. Jobs rely on it.

One ``ActiveDeadlineHandler`` answers both questions of
``pykubelet.lifecycle.interfaces``, so the deadline is decided in one place:

- ``should_sync``, asked by the sync loop's 1 s tick: a pod past its
  deadline is synced at once, so the deadline is acted on within about a
  second of passing rather than at the pod's next resync or event. A
  deadline shortened through the API arrives as a pod update and is acted on
  by that update's sync, or by the next tick once it passes;
- ``should_evict``, asked by every status generation (``pod_sync.py``): the
  pod's status becomes Failed/DeadlineExceeded. A terminal status ends the
  pod's sync, and its pod worker terminates it: the containers are stopped
  within their grace period and, whatever the restart policy, not restarted;
  the pod stays Failed.

Like upstream, the handler does not look at the phase: a pod that already
ended keeps answering True, and its finished pod worker ignores the sync.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from kubernetes_asyncio.client import V1Pod, V1PodStatus

from pykubelet.api import pod_uid
from pykubelet.events import NORMAL, EventRecorder
from pykubelet.lifecycle.interfaces import KEEP, ShouldEvictResponse

DEADLINE_EXCEEDED_REASON = "DeadlineExceeded"
DEADLINE_EXCEEDED_MESSAGE = "Pod was active on the node longer than the specified deadline"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ActiveDeadlineHandler:
    """Both a ``PodSyncLoopHandler`` and a ``PodSyncHandler``, on one clock."""

    def __init__(self, *, status_provider: Callable[[str], V1PodStatus | None],
                 recorder: EventRecorder, clock: Callable[[], datetime] = _utcnow) -> None:
        """``status_provider`` gives the kubelet's latest status of a pod UID (the status
        manager's, read only), ``clock`` the wall-clock time in UTC (a fake for tests)."""
        self._status_provider = status_provider
        self._recorder = recorder
        self._clock = clock

    def should_sync(self, pod: V1Pod) -> bool:
        return self.past_active_deadline(pod)

    def should_evict(self, pod: V1Pod) -> ShouldEvictResponse:
        """Fail a pod past its deadline, recording the event that says why."""
        if not self.past_active_deadline(pod):
            return KEEP
        self._recorder.event(pod, NORMAL, DEADLINE_EXCEEDED_REASON, DEADLINE_EXCEEDED_MESSAGE)
        return ShouldEvictResponse(evict=True, reason=DEADLINE_EXCEEDED_REASON,
                                   message=DEADLINE_EXCEEDED_MESSAGE)

    def past_active_deadline(self, pod: V1Pod) -> bool:
        """Whether ``pod`` has been active for its ``activeDeadlineSeconds`` or longer."""
        deadline = pod.spec.active_deadline_seconds if pod.spec is not None else None
        if deadline is None:
            return False
        # The kubelet's own status first; before its first sync, what the source says.
        status = self._status_provider(pod_uid(pod))
        if status is None:
            status = pod.status
        start = status.start_time if status is not None else None
        if start is None:
            return False
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        return self._clock() - start >= timedelta(seconds=int(deadline))


__all__ = ["DEADLINE_EXCEEDED_MESSAGE", "DEADLINE_EXCEEDED_REASON", "ActiveDeadlineHandler"]
