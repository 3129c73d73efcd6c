"""The status manager: the kubelet's record of every pod's latest status
(upstream ``status/status_manager.go``).

Pod workers compute a status on every sync, probes flip container readiness in
between, and termination forces containers to a final state. All of those
writes go through here so that a few invariants hold whoever writes: the start
time and condition transition times do not move while nothing changed, a
container that terminated under ``restartPolicy: Never`` does not come back to
life, a pod that reached Succeeded or Failed stays there, and timestamps are
at the API's second precision. Readers (the ``/pods`` endpoint, the next status
generation) get copies.

There is no API server yet. Each accepted change bumps a version, and
``sync`` hands the newest unsent versions to a ``StatusSink``: cluster mode
plugs its pod-status patcher in there; standalone mode has none and statuses
simply live here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, overload

from kubernetes_asyncio.client import (
    V1ContainerState,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
)

from pykubelet.api import POD_FAILED, TERMINAL_POD_PHASES, pod_ref, to_dict
from pykubelet.api.kubetypes import is_static_pod
from pykubelet.container.helpers import is_restartable_init_container
from pykubelet.status.generate import (
    CONTAINER_STATUS_UNKNOWN,
    CONTAINERS_READY,
    DISRUPTION_TARGET,
    POD_INITIALIZED,
    POD_READY,
    POD_READY_TO_START_CONTAINERS,
    POD_SCHEDULED,
    UNKNOWN_EXIT_CODE,
    generate_containers_ready_condition,
    generate_pod_ready_condition,
    pod_uid,
    stamp_transition_time,
)
from pykubelet.util import klog

# Upstream's budget for all termination messages of one pod, shared between its containers.
MAX_POD_TERMINATION_MESSAGE_LENGTH = 12 * 1024

_TIMED_CONDITIONS = (CONTAINERS_READY, POD_READY, POD_INITIALIZED, POD_READY_TO_START_CONTAINERS,
                     POD_SCHEDULED, DISRUPTION_TARGET)
_LOST_CONTAINER_MESSAGE = "The container could not be located when the pod was terminated"


class StatusSink(Protocol):
    """Where accepted statuses are published (the API server in cluster mode)."""

    async def patch_status(self, pod: V1Pod, status: V1PodStatus) -> None: ...


class IllegalTransitionError(ValueError):
    """A status update would bring a container back from a final termination."""


@dataclass
class _VersionedStatus:
    pod: V1Pod
    status: V1PodStatus
    version: int


def _utcnow() -> datetime:
    return datetime.now(UTC)


class StatusManager:
    """The per-pod status cache, keyed by pod UID."""

    def __init__(self, sink: StatusSink | None = None, *,
                 now: Callable[[], datetime] = _utcnow) -> None:
        self._sink = sink
        self._now = now
        self._statuses: dict[str, _VersionedStatus] = {}
        self._published_versions: dict[str, int] = {}

    def get_pod_status(self, uid: str) -> V1PodStatus | None:
        cached = self._statuses.get(uid)
        return copy.deepcopy(cached.status) if cached is not None else None

    def peek_pod_status(self, uid: str) -> V1PodStatus | None:
        """The cached status itself, not a copy: for hot paths that only read it.

        Probe workers read a pod's status on every probe; deep-copying the
        generated models costs about half a millisecond each, which at 100
        probes a second is several percent of a core. Callers must not mutate it.
        """
        cached = self._statuses.get(uid)
        return cached.status if cached is not None else None

    def pod_with_status(self, pod: V1Pod) -> V1Pod:
        """A copy of ``pod`` carrying the status recorded here (or its own when none is)."""
        filled = copy.deepcopy(pod)
        cached = self._statuses.get(pod_uid(pod))
        if cached is not None:
            filled.status = copy.deepcopy(cached.status)
        return filled

    def set_pod_status(self, pod: V1Pod, status: V1PodStatus) -> None:
        """Record a freshly generated status for ``pod``, subject to the invariants."""
        deleting = pod.metadata is not None and pod.metadata.deletion_timestamp is not None
        self._update(pod, copy.deepcopy(status), force=deleting)

    def terminate_pod(self, pod: V1Pod) -> None:
        """Give every container still without a final state a failed one, and end the phase.

        Called when the pod's containers are all stopped: whatever we could not
        observe is reported as a failure rather than a success.
        """
        cached = self._statuses.get(pod_uid(pod))
        status = copy.deepcopy(cached.status if cached is not None else pod.status or V1PodStatus())

        if has_pod_initialized(pod, status):
            for container_status in status.container_statuses or []:
                if not _is_terminated(container_status):
                    container_status.state = _lost_container_state()
        for container_status in _initialized_prefix(status.init_container_statuses or []):
            if not _is_terminated(container_status):
                container_status.state = _lost_container_state()

        if not is_static_pod(pod) and status.phase not in TERMINAL_POD_PHASES:
            klog.v(3).info("Marking terminal pod as failed", pod=pod_ref(pod),
                           oldPhase=status.phase or "")
            status.phase = POD_FAILED
        self._update(pod, status, force=True)

    def remove_orphaned_statuses(self, known_uids: Iterable[str]) -> None:
        """Forget the statuses of pods that no longer exist."""
        keep = set(known_uids)
        for uid in [uid for uid in self._statuses if uid not in keep]:
            klog.v(5).info("Removing pod from status map", podUID=uid)
            del self._statuses[uid]
            self._published_versions.pop(uid, None)

    def set_container_readiness(self, uid: str, container_id: str, ready: bool) -> None:
        """Record a readiness probe result and recompute the pod's readiness conditions."""
        cached = self._statuses.get(uid)
        if cached is None:
            klog.info("Container readiness changed before pod has synced", podUID=uid,
                      containerID=container_id)
            return
        status = copy.deepcopy(cached.status)
        container_status = _find_by_container_id(status, container_id)
        if container_status is None:
            klog.info("Container readiness changed for unknown container", podUID=uid,
                      containerID=container_id)
            return
        if bool(container_status.ready) == ready:
            klog.v(4).info("Container readiness unchanged", podUID=uid, containerID=container_id,
                           ready=ready)
            return
        container_status.ready = ready
        all_statuses = [*(status.init_container_statuses or []),
                        *(status.container_statuses or [])]
        pod = cached.pod
        ready_condition = generate_pod_ready_condition(pod, status.conditions or [], all_statuses,
                                                       status.phase or "")
        containers_ready = generate_containers_ready_condition(pod, all_statuses,
                                                               status.phase or "")
        conditions = list(status.conditions or [])
        for condition in (ready_condition, containers_ready):
            index = next((i for i, c in enumerate(conditions) if c.type == condition.type), None)
            if index is None:
                conditions.append(condition)
            else:
                conditions[index] = condition
        status.conditions = conditions
        self._update(pod, status, force=False)

    async def sync(self) -> int:
        """Publish every status changed since it was last published; returns how many were."""
        if self._sink is None:
            return 0
        published = 0
        for uid, cached in list(self._statuses.items()):
            if self._published_versions.get(uid, 0) >= cached.version:
                continue
            try:
                await self._sink.patch_status(cached.pod, copy.deepcopy(cached.status))
            except Exception as err:
                # Left unpublished: the next sync retries it.
                klog.error("Failed to update status for pod", err, pod=pod_ref(cached.pod))
                continue
            self._published_versions[uid] = cached.version
            published += 1
        return published

    def _update(self, pod: V1Pod, status: V1PodStatus, *, force: bool) -> None:
        uid = pod_uid(pod)
        cached = self._statuses.get(uid)
        old = cached.status if cached is not None else pod.status or V1PodStatus()

        try:
            check_container_state_transition(old, status, pod.spec)
        except IllegalTransitionError as err:
            klog.error("Status update on pod aborted", err, pod=pod_ref(pod))
            return

        if old.phase in TERMINAL_POD_PHASES and status.phase != old.phase:
            klog.error("Pod attempted illegal phase transition", pod=pod_ref(pod),
                       originalStatusPhase=old.phase, apiStatusPhase=status.phase or "")
            status.phase, status.reason, status.message = old.phase, old.reason, old.message

        now = self._now().replace(microsecond=0)
        for condition in status.conditions or []:
            if condition.type in _TIMED_CONDITIONS:
                stamp_transition_time(condition, old.conditions, now)
        if old.start_time is not None:
            status.start_time = old.start_time
        elif status.start_time is None:
            status.start_time = now

        normalize_status(pod, status)

        if cached is not None and not force and to_dict(cached.status) == to_dict(status):
            klog.v(5).info("Ignoring same status for pod", pod=pod_ref(pod))
            return
        version = cached.version + 1 if cached is not None else 1
        self._statuses[uid] = _VersionedStatus(pod=copy.deepcopy(pod), status=status,
                                               version=version)


def check_container_state_transition(old: V1PodStatus, new: V1PodStatus,
                                     spec: V1PodSpec) -> None:
    """Raise if a container that may not restart leaves the terminated state."""
    policy = spec.restart_policy or "Always"
    if policy == "Always":
        return

    def restart_forbidden(container_status: V1ContainerStatus) -> bool:
        if not _is_terminated(container_status):
            return False
        return not (container_status.state.terminated.exit_code != 0 and policy == "OnFailure")

    new_by_name = {s.name: s for s in new.container_statuses or []}
    for before in old.container_statuses or []:
        after = new_by_name.get(before.name)
        if restart_forbidden(before) and after is not None and not _is_terminated(after):
            raise IllegalTransitionError(
                f"terminated container {before.name} attempted illegal transition to "
                "non-terminated state")

    sidecars = {c.name for c in spec.init_containers or [] if is_restartable_init_container(c)}
    new_init_by_name = {s.name: s for s in new.init_container_statuses or []}
    for before in old.init_container_statuses or []:
        if before.name in sidecars:
            continue
        after = new_init_by_name.get(before.name)
        if restart_forbidden(before) and after is not None and not _is_terminated(after):
            raise IllegalTransitionError(
                f"terminated init container {before.name} attempted illegal transition to "
                "non-terminated state")


def normalize_status(pod: V1Pod, status: V1PodStatus) -> None:
    """Bring a status to what the API would store: second-precision times, bounded
    termination messages, containers in a stable order."""
    containers = (len(pod.spec.containers or []) + len(pod.spec.init_containers or [])
                  + len(pod.spec.ephemeral_containers or []))
    message_budget = MAX_POD_TERMINATION_MESSAGE_LENGTH // max(containers, 1)

    def normalize_state(state: V1ContainerState | None) -> None:
        if state is None:
            return
        if state.running is not None:
            state.running.started_at = _to_seconds(state.running.started_at)
        if state.terminated is not None:
            terminated = state.terminated
            terminated.started_at = _to_seconds(terminated.started_at)
            terminated.finished_at = _to_seconds(terminated.finished_at)
            if terminated.message and len(terminated.message) > message_budget:
                terminated.message = terminated.message[:message_budget]

    status.start_time = _to_seconds(status.start_time)
    for condition in status.conditions or []:
        condition.last_probe_time = _to_seconds(condition.last_probe_time)
        condition.last_transition_time = _to_seconds(condition.last_transition_time)
    for container_status in [*(status.container_statuses or []),
                             *(status.init_container_statuses or []),
                             *(status.ephemeral_container_statuses or [])]:
        normalize_state(container_status.state)
        normalize_state(container_status.last_state)
    if status.container_statuses:
        status.container_statuses = sorted(status.container_statuses, key=lambda s: s.name)
    if status.ephemeral_container_statuses:
        status.ephemeral_container_statuses = sorted(status.ephemeral_container_statuses,
                                                     key=lambda s: s.name)
    if status.init_container_statuses:
        order = {c.name: i for i, c in enumerate(pod.spec.init_containers or [])}
        status.init_container_statuses = sorted(status.init_container_statuses,
                                                key=lambda s: order.get(s.name, len(order)))


def has_pod_initialized(pod: V1Pod, status: V1PodStatus) -> bool:
    """Whether the pod has evidence of having finished its init containers."""
    init_containers = pod.spec.init_containers or []
    if not init_containers:
        return True
    for container_status in status.container_statuses or []:
        state = container_status.state
        if _last_terminated(container_status) is not None or state is None \
                or state.waiting is None:
            return True
    init_statuses: Sequence[V1ContainerStatus] = status.init_container_statuses or []
    if not init_statuses:
        return False
    last = init_statuses[-1]
    spec = next((c for c in init_containers if c.name == last.name), None)
    if spec is None:
        klog.v(4).info("Mismatch between pod spec and status", pod=pod_ref(pod),
                       containerName=last.name)
        return False
    if is_restartable_init_container(spec):
        return bool(last.state is not None and last.state.running is not None and last.started)
    for state in (last.last_state, last.state):
        if state is not None and state.terminated is not None and state.terminated.exit_code == 0:
            return True
    return False


def _initialized_prefix(statuses: Sequence[V1ContainerStatus]) -> Sequence[V1ContainerStatus]:
    # Init containers that never tried to start (the waiting tail) say nothing about
    # the pod's fate, but the first one is always kept so that an uninitialised pod
    # still shows a failure.
    for index in range(len(statuses) - 1, -1, -1):
        state = statuses[index].state
        if state is None or state.waiting is None or _last_terminated(statuses[index]):
            return statuses[:index + 1]
    return statuses[:1]


def _lost_container_state() -> V1ContainerState:
    return V1ContainerState(terminated=V1ContainerStateTerminated(
        reason=CONTAINER_STATUS_UNKNOWN, message=_LOST_CONTAINER_MESSAGE,
        exit_code=UNKNOWN_EXIT_CODE))


def _is_terminated(container_status: V1ContainerStatus) -> bool:
    return container_status.state is not None and container_status.state.terminated is not None


def _last_terminated(container_status: V1ContainerStatus) -> V1ContainerStateTerminated | None:
    last = container_status.last_state
    return last.terminated if last is not None else None


def _find_by_container_id(status: V1PodStatus, container_id: str) -> V1ContainerStatus | None:
    for container_status in [*(status.container_statuses or []),
                             *(status.init_container_statuses or [])]:
        if container_status.container_id == container_id:
            return container_status
    return None


@overload
def _to_seconds(moment: datetime) -> datetime: ...


@overload
def _to_seconds(moment: None) -> None: ...


def _to_seconds(moment: datetime | None) -> datetime | None:
    # The API stores times at second precision; comparing finer times would see changes
    # that do not survive a round trip.
    return moment.replace(microsecond=0) if moment is not None else None

