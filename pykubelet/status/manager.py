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

In cluster mode the manager also owns the pod's ``status`` in the API
(``run``): each accepted change bumps a per-pod version and wakes the sync
loop, which reads the pod, merges in the conditions the kubelet does not own,
and PATCHes the difference (``status.patch``) only when there is one; every
10 s it also re-checks every pod against the API's copy (the pod manager's,
kept current by the watch) and rewrites what drifted. A static pod's status
goes to its mirror pod. A pod being deleted gracefully is deleted for good
(grace period 0, UID precondition) once its final status is written and its
containers are gone. A pod gone from the API (the watch reported its deletion,
or a GET answered 404) is not read again: the statuses its termination still
records stay here for the kubelet's readers only. Standalone mode has no sink
and statuses simply live here.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, overload

from kubernetes_asyncio.client import (
    V1ContainerState,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
)

from pykubelet import metrics
from pykubelet.api import (
    POD_FAILED,
    TERMINAL_POD_PHASES,
    all_containers,
    clone,
    is_terminal_phase,
    pod_ref,
    to_dict,
)
from pykubelet.api.kubetypes import is_mirror_pod, is_static_pod
from pykubelet.container.helpers import is_restartable_init_container
from pykubelet.status.generate import (
    CONTAINER_STATUS_UNKNOWN,
    CONTAINERS_READY,
    DISRUPTION_TARGET,
    KUBELET_CONDITIONS,
    POD_COMPLETED,
    POD_FAILED_REASON,
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
from pykubelet.status.patch import Path, dropped_fields, pod_status_patch, status_wire
from pykubelet.util import klog

# Upstream's budget for all termination messages of one pod, shared between its containers.
MAX_POD_TERMINATION_MESSAGE_LENGTH = 12 * 1024

_TIMED_CONDITIONS = (CONTAINERS_READY, POD_READY, POD_INITIALIZED, POD_READY_TO_START_CONTAINERS,
                     POD_SCHEDULED, DISRUPTION_TARGET)
_LOST_CONTAINER_MESSAGE = "The container could not be located when the pod was terminated"


# Upstream syncPeriod: every status is checked against the API this often.
SYNC_PERIOD = 10.0
# How long a pod found gone from the API is remembered as gone (see _gone_from_api).
GONE_MEMORY = timedelta(minutes=2)


class StatusSink(Protocol):
    """The API server's pod endpoints the manager writes statuses through (cluster mode)."""

    async def get_pod(self, namespace: str, name: str) -> V1Pod | None:
        """The pod as stored now; None when it does not exist.

        The manager reads only its metadata and status; a sink may leave the
        spec out (``ApiStatusSink`` does not decode it)."""
        ...

    async def patch_pod_status(self, namespace: str, name: str,
                               patch: dict[str, Any]) -> V1Pod:
        """Apply a strategic merge patch to ``pods/status``; the stored pod afterwards
        (metadata and status, as for ``get_pod``)."""
        ...

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete at once (grace period 0), only if the stored pod still has ``uid``."""
        ...


class PodLookup(Protocol):
    """What the manager asks the pod manager: the API's view of pods and mirror pods."""

    def get_pod_by_uid(self, uid: str) -> V1Pod | None: ...

    def get_mirror_pod_by_pod(self, pod: V1Pod) -> V1Pod | None: ...

    def translate_pod_uid(self, uid: str) -> str:
        """A mirror pod's UID becomes its static pod's; any other UID stays as it is."""
        ...

    def get_uid_translations(self) -> tuple[dict[str, str], dict[str, str]]:
        """(static pod UID -> mirror pod UID or "", mirror pod UID -> static pod UID)."""
        ...


class IllegalTransitionError(ValueError):
    """A status update would bring a container back from a final termination."""


@dataclass
class _VersionedStatus:
    pod: V1Pod
    status: V1PodStatus
    version: int
    # The status written at the end of the pod's life (terminate_pod): the
    # pod may be deleted from the API once it is published.
    pod_is_finished: bool = False


def _utcnow() -> datetime:
    return datetime.now(UTC)


class StatusManager:
    """The per-pod status cache, keyed by pod UID."""

    def __init__(self, sink: StatusSink | None = None, *,
                 pods: PodLookup | None = None,
                 could_have_running_containers: Callable[[str], bool] | None = None,
                 now: Callable[[], datetime] = _utcnow) -> None:
        self._sink = sink
        self._pods = pods
        self._could_have_running_containers = could_have_running_containers
        self._now = now
        self._statuses: dict[str, _VersionedStatus] = {}
        # Latest version written to the API, keyed by the UID of the API object
        # (the mirror pod's for a static pod).
        self._api_versions: dict[str, int] = {}
        # API objects (keyed as ``_api_versions``) a GET found gone, and when. UIDs are
        # never reused, so none of them comes back: their statuses are kept for the
        # readers until the pod is forgotten, but not read from the API again. Kept for
        # GONE_MEMORY, not only while the status is: a pod worker still stopping the
        # pod may record a status after housekeeping forgot the pod's.
        self._gone_from_api: dict[str, datetime] = {}
        self._changed = asyncio.Event()
        # Status fields the API server turned out not to keep (it is older than
        # the kubelet): left out of comparisons so they are not rewritten forever.
        self._server_drops: set[Path] = set()
        self.requests = 0
        metrics.track_table("status_manager", self.tracked_pods)

    def tracked_pods(self) -> int:
        """Pods with a cached status (the ``pykubelet_tracked_pods`` gauge: leak checks)."""
        return len(self._statuses)

    def get_pod_status(self, uid: str) -> V1PodStatus | None:
        cached = self._statuses.get(uid)
        return clone(cached.status) if cached is not None else None

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
        filled = clone(pod)
        cached = self._statuses.get(pod_uid(pod))
        if cached is not None:
            filled.status = clone(cached.status)
        return filled

    def set_pod_status(self, pod: V1Pod, status: V1PodStatus) -> None:
        """Record a freshly generated status for ``pod``, subject to the invariants."""
        deleting = pod.metadata is not None and pod.metadata.deletion_timestamp is not None
        self._update(pod, clone(status), force=deleting)

    def terminate_pod(self, pod: V1Pod) -> None:
        """Give every container still without a final state a failed one, and end the phase.

        Called when the pod's containers are all stopped: whatever we could not
        observe is reported as a failure rather than a success.
        """
        cached = self._statuses.get(pod_uid(pod))
        status = clone(cached.status if cached is not None else pod.status or V1PodStatus())

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
        self._update(pod, status, force=True, pod_is_finished=True)

    def remove_orphaned_statuses(self, known_uids: Iterable[str]) -> None:
        """Forget the statuses of pods that no longer exist."""
        keep = set(known_uids)
        for uid in [uid for uid in self._statuses if uid not in keep]:
            klog.v(5).info("Removing pod from status map", podUID=uid)
            del self._statuses[uid]

    def set_container_readiness(self, uid: str, container_id: str, ready: bool) -> None:
        """Record a readiness probe result and recompute the pod's readiness conditions."""
        cached = self._statuses.get(uid)
        if cached is None:
            klog.info("Container readiness changed before pod has synced", podUID=uid,
                      containerID=container_id)
            return
        status = clone(cached.status)
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

    # -- publishing to the API server ----------------------------------------------

    async def run(self, period: float = SYNC_PERIOD) -> None:
        """Publish changes as they come and re-check everything every ``period`` (cluster mode)."""
        if self._sink is None:
            klog.info("Kubernetes client is nil, not starting status manager")
            return
        klog.info("Starting to sync pod status with apiserver")
        deadline = time.monotonic() + period
        while True:
            timeout = max(0.0, deadline - time.monotonic())
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                klog.v(4).info("Syncing all statuses")
                deadline = time.monotonic() + period
                await self.sync_batch(all_pods=True)
                continue
            self._changed.clear()
            klog.v(4).info("Syncing updated statuses")
            await self.sync_batch(all_pods=False)

    async def sync(self) -> int:
        """Publish every status changed since it was last published; returns how many were tried."""
        return await self.sync_batch(all_pods=False)

    async def sync_batch(self, all_pods: bool) -> int:
        """Write what changed (``all_pods``: also what drifted from the API's copy)."""
        if self._sink is None:
            return 0
        pod_to_mirror, mirror_to_pod = (self._pods.get_uid_translations()
                                        if self._pods is not None else ({}, {}))
        if all_pods:
            for uid in [u for u in self._api_versions
                        if u not in self._statuses and u not in mirror_to_pod]:
                del self._api_versions[uid]
            forget_before = self._now() - GONE_MEMORY
            for uid in [u for u, at in self._gone_from_api.items() if at < forget_before]:
                del self._gone_from_api[uid]
        due: list[tuple[str, str, _VersionedStatus]] = []
        for uid, cached in self._statuses.items():
            status_uid = uid
            if uid in pod_to_mirror:
                status_uid = pod_to_mirror[uid]
                if not status_uid:
                    klog.v(5).info("Static pod does not have a corresponding mirror pod; skipping",
                                   podUID=uid, pod=pod_ref(cached.pod))
                    continue
            if status_uid in self._gone_from_api:
                continue
            if self._deleted_in_api(uid, cached):
                # Its GET could only answer 404: remembered as gone without asking.
                self._gone_from_api[status_uid] = self._now()
                continue
            if not all_pods:
                if self._api_versions.get(status_uid, 0) < cached.version:
                    due.append((uid, status_uid, cached))
                continue
            if self._needs_update(status_uid, cached):
                due.append((uid, status_uid, cached))
            elif self._needs_reconcile(uid, cached.status):
                self._api_versions.pop(status_uid, None)
                due.append((uid, status_uid, cached))
        for uid, status_uid, cached in due:
            klog.v(5).info("Sync pod status", podUID=uid, statusUID=status_uid,
                           version=cached.version)
            try:
                await self._sync_pod(uid, status_uid, cached)
            except Exception as err:
                # Left unpublished: the next change or the periodic sync retries it.
                klog.info("Failed to update status for pod", pod=pod_ref(cached.pod),
                          err=str(err) or type(err).__name__)
        return len(due)

    async def _sync_pod(self, uid: str, status_uid: str, cached: _VersionedStatus) -> None:
        assert self._sink is not None
        meta = cached.pod.metadata
        namespace, name = meta.namespace or "", meta.name or ""
        self.requests += 1
        pod = await self._sink.get_pod(namespace, name)
        if pod is None:
            # No pod of that name: the object ``status_uid`` is gone for good (a new pod
            # taking the name would have a new UID). The pod manager forgets it once the
            # watch reports the deletion; until then no status of it is sent or read again.
            klog.v(3).info("Pod does not exist on the server", podUID=uid,
                           pod=f"{namespace}/{name}")
            self._gone_from_api[status_uid] = self._now()
            return
        api_uid = pod_uid(pod)
        translated = self._pods.translate_pod_uid(api_uid) if self._pods is not None else api_uid
        if translated and translated != uid:
            klog.v(2).info("Pod was deleted and then recreated, skipping status update",
                           pod=pod_ref(pod), oldPodUID=uid, podUID=translated)
            self._delete_status(uid)
            return

        merged = merge_pod_status(pod.status, cached.status,
                                  self._delay_terminal(uid, pod, cached))
        patch, unchanged = pod_status_patch(api_uid, pod.status, merged, self._server_drops)
        if unchanged:
            klog.v(3).info("Status for pod is up-to-date", pod=pod_ref(pod),
                           statusVersion=cached.version)
        else:
            klog.v(3).info("Patch status for pod", pod=pod_ref(pod), podUID=uid,
                           patch=str(patch))
            self.requests += 1
            pod = await self._sink.patch_pod_status(namespace, name, patch)
            klog.v(3).info("Status for pod updated successfully", pod=pod_ref(pod),
                           statusVersion=cached.version)
            dropped = dropped_fields(status_wire(merged, self._server_drops),
                                     status_wire(pod.status))
            if dropped - self._server_drops:
                klog.info("The API server does not keep these pod status fields; not "
                          "comparing them any more",
                          fields=",".join(sorted(".".join(p) for p in dropped)))
                self._server_drops |= dropped
        self._api_versions[api_uid] = cached.version

        if self._can_be_deleted(pod, cached):
            self.requests += 1
            await self._sink.delete_pod(namespace, name, api_uid)
            klog.v(3).info("Pod fully terminated and removed from etcd", pod=pod_ref(pod))
            self._delete_status(uid)

    def _deleted_in_api(self, uid: str, cached: _VersionedStatus) -> bool:
        """The watch reported the pod's deletion: the pod manager, fed by it, removed the
        pod. Not for static pods, which live in files and write to a mirror pod."""
        return (self._pods is not None and not is_static_pod(cached.pod)
                and self._pods.get_pod_by_uid(uid) is None)

    def _delay_terminal(self, uid: str, api_pod: V1Pod, cached: _VersionedStatus) -> bool:
        """A terminal phase waits until no container of the pod can still be running."""
        if self._could_have_running_containers is None or cached.pod_is_finished:
            return False
        return self._could_have_running_containers(uid)

    def _needs_update(self, status_uid: str, cached: _VersionedStatus) -> bool:
        latest = self._api_versions.get(status_uid)
        if latest is None or latest < cached.version:
            return True
        pod = self._pods.get_pod_by_uid(status_uid) if self._pods is not None else None
        return pod is not None and self._can_be_deleted(pod, cached)

    def _needs_reconcile(self, uid: str, status: V1PodStatus) -> bool:
        """The API's copy (from the watch) differs from what the kubelet last decided."""
        if self._pods is None:
            return False
        pod = self._pods.get_pod_by_uid(uid)
        if pod is None:
            klog.v(4).info("Pod has been deleted, no need to reconcile", podUID=uid)
            return False
        if is_static_pod(pod):
            mirror = self._pods.get_mirror_pod_by_pod(pod)
            if mirror is None:
                klog.v(4).info("Static pod has no corresponding mirror pod, no need to reconcile",
                               pod=pod_ref(pod))
                return False
            pod = mirror
        api_status = clone(pod.status) if pod.status is not None else V1PodStatus()
        normalize_status(pod, api_status)
        if is_pod_status_by_kubelet_equal(api_status, status, self._server_drops):
            return False
        klog.v(3).info("Pod status is inconsistent with cached status for pod, a reconciliation "
                       "should be triggered", pod=pod_ref(pod))
        return True

    @staticmethod
    def _can_be_deleted(pod: V1Pod, cached: _VersionedStatus) -> bool:
        meta = pod.metadata
        if meta is None or meta.deletion_timestamp is None or is_mirror_pod(pod):
            return False
        phase = pod.status.phase if pod.status is not None else None
        if not is_terminal_phase(phase):
            klog.v(3).info("Delaying pod deletion as the phase is non-terminal", pod=pod_ref(pod),
                           phase=phase or "")
            return False
        return cached.pod_is_finished

    def _delete_status(self, uid: str) -> None:
        self._statuses.pop(uid, None)

    def api_version_of(self, uid: str) -> int:
        """The version last written to the API for the object ``uid`` (0: none yet)."""
        return self._api_versions.get(uid, 0)

    def _update(self, pod: V1Pod, status: V1PodStatus, *, force: bool,
                pod_is_finished: bool = False) -> None:
        uid = pod_uid(pod)
        cached = self._statuses.get(uid)
        if cached is not None:
            old = cached.status
            if cached.pod_is_finished and not is_static_pod(pod):
                pod_is_finished = True
        else:
            # Before the first local status, the API's (a mirror pod's for a
            # static pod) is what must not regress.
            mirror = self._pods.get_mirror_pod_by_pod(pod) if self._pods is not None else None
            source = mirror if mirror is not None else pod
            old = source.status or V1PodStatus()

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
        self._statuses[uid] = _VersionedStatus(
            pod=clone(pod), status=status, version=version,
            pod_is_finished=pod_is_finished)
        self._changed.set()


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
    containers = len(all_containers(pod))
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


def merge_pod_status(api_status: V1PodStatus | None, status: V1PodStatus,
                     delay_terminal: bool) -> V1PodStatus:
    """The status to write over ``api_status``: the kubelet's, plus conditions it does not own.

    A terminal phase is held back (``delay_terminal``) while containers may
    still run, and a terminal pod is never reported ready.
    """
    merged = clone(status)
    old = api_status or V1PodStatus()
    conditions = [c for c in old.conditions or [] if c.type not in KUBELET_CONDITIONS]
    to_terminal = not is_terminal_phase(old.phase) and is_terminal_phase(status.phase)
    for condition in status.conditions or []:
        if condition.type in KUBELET_CONDITIONS:
            conditions.append(condition)
        elif condition.type == DISRUPTION_TARGET and to_terminal and not delay_terminal:
            conditions = [c for c in conditions if c.type != DISRUPTION_TARGET] + [condition]
    merged.conditions = conditions
    if to_terminal and delay_terminal:
        merged.phase, merged.reason, merged.message = old.phase, old.reason, old.message
    if is_terminal_phase(merged.phase):
        reason = POD_COMPLETED if merged.phase == "Succeeded" else POD_FAILED_REASON
        for condition in merged.conditions:
            if condition.type in (POD_READY, CONTAINERS_READY) and condition.status == "True":
                condition.status, condition.reason, condition.message = "False", reason, ""
                condition.last_transition_time = _utcnow().replace(microsecond=0)
    return merged


def is_pod_status_by_kubelet_equal(api_status: V1PodStatus, status: V1PodStatus,
                                   ignored: frozenset[Path] | set[Path] = frozenset()) -> bool:
    """Equal as far as the kubelet is concerned: its conditions by status, reason and message
    (not times), everything else by value; conditions owned by others are ignored."""
    by_type = {c.type: c for c in api_status.conditions or []}
    for condition in status.conditions or []:
        if condition.type in KUBELET_CONDITIONS or condition.type == DISRUPTION_TARGET:
            other = by_type.get(condition.type)
            if other is None or (other.status, other.reason or "", other.message or "") != (
                    condition.status, condition.reason or "", condition.message or ""):
                return False
    api_copy = copy.copy(api_status)
    api_copy.conditions = status.conditions
    return bool(status_wire(api_copy, ignored) == status_wire(status, ignored))


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

