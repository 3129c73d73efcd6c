"""Pod workers: one serialised worker per pod UID (upstream ``pod_workers.go``).

Every change to a pod (a new spec, a resync tick, a PLEG event, a kill)
arrives through ``PodWorkers.update_pod``. Each UID gets one asyncio task that
applies those changes strictly one at a time, so two syncs of the same pod
never race; a change that arrives while a sync runs is parked as the pending
update, and a newer one replaces it (only the latest desired state matters),
except that once termination is requested every later update is a kill.

A pod moves through three phases, never backwards for the same UID:

- syncing: ``sync_pod`` drives the runtime towards the spec, until the pod is
  deleted, killed, evicted, or ``sync_pod`` reports a terminal phase;
- terminating: ``sync_terminating_pod`` runs until it returns without error,
  after which no container of the pod can be running;
- terminated: ``sync_terminated_pod`` releases what must be released before
  the pod may be forgotten; then the worker stops.

A finished UID is remembered until ``sync_known_pods`` (housekeeping) sees it
is no longer desired, so a terminated pod is never restarted by a late or
replayed update. Failed syncs are not retried by the worker itself: like
upstream, it schedules the UID in a ``WorkQueue`` that the kubelet's sync loop
drains every second, sending a new ``update_pod`` for each due pod.

Before each sync the worker waits for the pod cache to be newer than the end
of its previous sync (``PodCache.get_newer_than``), so it never acts on a
runtime state that predates its own last actions. A termination request cuts
that wait short, as it cancels a sync in flight. All times come from one
injected clock, ``time.monotonic`` by default, the clock PLEG stamps the
cache with.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import math
import random
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1ObjectMeta, V1Pod, V1PodStatus

from pykubelet import metrics
from pykubelet.api import pod_uid
from pykubelet.api.kubetypes import SyncPodType, build_pod_full_name, is_static_pod
from pykubelet.container import ContainerState, Pod, PodStatus
from pykubelet.container.cache import PodCache
from pykubelet.util import klog

T = TypeVar("T")

# Upstream kubelet constants: jitter added to requeue delays, the short
# backoff used while the pod network is not ready yet and the message that
# identifies that condition in a sync error.
RESYNC_JITTER_FACTOR = 0.5
BACKOFF_JITTER_FACTOR = 0.5
NETWORK_NOT_READY_BACKOFF = 1.0
NETWORK_NOT_READY_ERROR_MSG = "network is not ready"
# Upstream kubelet defaults: syncFrequency and the sync error backoff.
DEFAULT_RESYNC_INTERVAL = 60.0
DEFAULT_BACKOFF_PERIOD = 10.0

_TERMINAL_PHASES = ("Succeeded", "Failed")


class PodWorkerState(enum.StrEnum):
    """The phase a pod worker is in."""

    SYNC = "sync"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


PodStatusFunc = Callable[[V1PodStatus], None]
"""Adjusts the final API status of a pod killed by the kubelet (e.g. reason Evicted)."""


@dataclass
class KillPodOptions:
    """How a kill request wants the pod terminated."""

    pod_status_func: PodStatusFunc | None = None
    grace_period_override: int | None = None
    evict: bool = False
    # Set once the pod is terminated (or immediately if it already was), for
    # callers that must wait for the kill, like eviction.
    completed: asyncio.Event | None = None


@dataclass
class UpdatePodOptions:
    """One change delivered to a pod worker.

    ``pod`` is required except for orphans: a pod found running in the
    runtime with no spec anywhere is described by ``running_pod`` alone and
    can only be killed. ``start_time`` (clock of the pod workers) marks when
    the change entered the kubelet, for latency metrics.
    """

    update_type: SyncPodType
    pod: V1Pod | None = None
    mirror_pod: V1Pod | None = None
    running_pod: Pod | None = None
    kill_pod_options: KillPodOptions | None = None
    start_time: float = 0.0


@dataclass(frozen=True)
class PodWorkerSync:
    """One worker as seen by housekeeping."""

    state: PodWorkerState
    orphan: bool = False
    has_config: bool = False
    static: bool = False


class PodSyncer(Protocol):
    """The pod lifecycle operations the kubelet provides to the workers.

    Each method may be cancelled (``asyncio.CancelledError``) when the pod is
    asked to terminate, or to terminate faster, while it runs.
    """

    async def sync_pod(self, update_type: SyncPodType, pod: V1Pod, mirror_pod: V1Pod | None,
                       pod_status: PodStatus) -> bool:
        """Set up and run the pod; True once the pod reached Succeeded or Failed."""
        ...

    async def sync_terminating_pod(self, pod: V1Pod, pod_status: PodStatus,
                                   grace_period: int | None) -> None:
        """Stop every container; raise unless all are known to be stopped."""
        ...

    async def sync_terminating_runtime_pod(self, running_pod: Pod) -> None:
        """Stop the containers of a pod that has no spec any more."""
        ...

    async def sync_terminated_pod(self, pod: V1Pod, pod_status: PodStatus) -> None:
        """Release what must go before the pod is forgotten and write its final status."""
        ...


def jitter(duration: float, max_factor: float,
           rand: Callable[[], float] = random.random) -> float:
    """``duration`` plus up to ``max_factor`` of it, so that retries do not align."""
    return duration + rand() * max_factor * duration


class WorkQueue:
    """Pod UIDs due for a sync at some time (upstream ``queue.WorkQueue``).

    Enqueuing a UID again replaces its due time. The kubelet's sync loop
    calls ``get_work`` on its 1 s ticker and syncs every UID returned.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._due: dict[str, float] = {}

    def enqueue_after(self, uid: str, delay: float) -> None:
        self._due[uid] = self._clock() + delay

    def get_work(self) -> list[str]:
        """Remove and return every UID whose due time has come."""
        now = self._clock()
        ready = [uid for uid, due in self._due.items() if due <= now]
        for uid in ready:
            del self._due[uid]
        return ready

    def due_time(self, uid: str) -> float | None:
        return self._due.get(uid)

    def __len__(self) -> int:
        return len(self._due)






def _pod_phase(pod: V1Pod) -> str | None:
    return pod.status.phase if pod.status is not None else None


def _runtime_pod_to_api_pod(running: Pod) -> V1Pod:
    """A placeholder spec for an orphan: enough for names and grace period defaults."""
    return V1Pod(metadata=V1ObjectMeta(uid=running.id, name=running.name,
                                       namespace=running.namespace))


def _is_cached_status_terminal(status: PodStatus) -> bool:
    if any(c.state == ContainerState.RUNNING for c in status.container_statuses):
        return False
    return not any(s.state == api_pb2.SANDBOX_READY for s in status.sandbox_statuses)


class _WorkerSignal:
    """Wakes one worker task: set when pending work exists, closed to make it exit."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.closed = False

    def notify(self) -> None:
        self._event.set()

    def close(self) -> None:
        self.closed = True
        self._event.set()

    async def next(self) -> bool:
        await self._event.wait()
        self._event.clear()
        return not self.closed


@dataclass
class _PodSyncStatus:
    """Where one UID is in its lifecycle; times are pod-worker clock readings."""

    fullname: str
    synced_at: float
    # True while an update is pending or being processed.
    working: bool = False
    # The newest change not yet picked up by the worker; replaced, not queued.
    pending_update: UpdatePodOptions | None = None
    # What the worker is (or last was) acting on: the source of truth for the
    # spec being reconciled. Pod and mirror pod are kept when an update lacks
    # them; kill options accumulate (grace periods only ever shrink).
    active_update: UpdatePodOptions | None = None
    started_at: float | None = None
    # Termination was requested; the worker may not have noticed yet.
    terminating_at: float | None = None
    # sync_terminating_pod succeeded: no container can be running.
    terminated_at: float | None = None
    grace_period: int = 0
    abnormal_terminations: list[KillPodOptions] = field(default_factory=list)
    # The worker has left sync_pod for good: no new container will start.
    started_terminating: bool = False
    deleted: bool = False
    evicted: bool = False
    # sync_terminated_pod succeeded; kept until housekeeping forgets the UID.
    finished: bool = False
    # A CREATE for this UID arrived while it was terminating: forget the old
    # incarnation as soon as it is finished so the new one can start.
    restart_requested: bool = False
    # The runtime has shown containers for this UID, so termination must run
    # even if the worker never started the pod.
    observed_runtime: bool = False
    # The syncer call in progress, cancelled when termination must preempt it.
    in_flight: asyncio.Future[Any] | None = None

    @property
    def is_termination_requested(self) -> bool:
        return self.terminating_at is not None

    @property
    def is_terminated(self) -> bool:
        return self.terminated_at is not None

    @property
    def is_started(self) -> bool:
        return self.started_at is not None

    def work_type(self) -> PodWorkerState:
        if self.is_terminated:
            return PodWorkerState.TERMINATED
        if self.is_termination_requested:
            return PodWorkerState.TERMINATING
        return PodWorkerState.SYNC

    def merge_last_update(self, update: UpdatePodOptions) -> None:
        active = self.active_update
        if active is None:
            active = self.active_update = UpdatePodOptions(update_type=update.update_type)
        active.update_type = update.update_type
        # An orphan's placeholder must not replace a real spec seen earlier.
        if active.pod is None or update.running_pod is None:
            active.pod = update.pod
        active.running_pod = update.running_pod
        if update.mirror_pod is not None:
            active.mirror_pod = update.mirror_pod
        if update.kill_pod_options is not None:
            active.kill_pod_options = KillPodOptions(
                evict=update.kill_pod_options.evict,
                grace_period_override=update.kill_pod_options.grace_period_override)


@dataclass
class _WorkerProgress:
    """What one worker carries from sync to sync: when its last sync ended (the next
    waits for a cache newer than that) and whether a sync of the pod went through."""

    last_sync_time: float = -math.inf
    synced_once: bool = False


@dataclass(frozen=True)
class _SyncOutcome:
    """How a syncer call ended: the pod reported terminal, failed, or cancelled because
    termination must preempt it (``interrupted``, its ``error`` the cancellation)."""

    is_terminal: bool = False
    error: BaseException | None = None
    interrupted: bool = False


@dataclass(frozen=True)
class _UpdateTarget:
    """A change to deliver (a copy) and the pod it is for; ``is_runtime_pod`` when that
    pod is an orphan known only from the runtime's listing."""

    options: UpdatePodOptions
    uid: str
    namespace: str
    name: str
    is_runtime_pod: bool

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class _SyncInterrupted(Exception):
    """The syncer call was cancelled because the pod must terminate (sooner)."""


@dataclass
class _Work:
    status: _PodSyncStatus
    update: UpdatePodOptions
    work_type: PodWorkerState
    can_start: bool
    can_ever_start: bool


def _effective_grace_period(status: _PodSyncStatus, pod: V1Pod,
                            options: KillPodOptions | None) -> tuple[int, bool]:
    """The grace period to use now, and whether it shortens the one in force.

    A grace period can only decrease once termination started; the API
    server's deletion grace period and the kubelet's own overrides (eviction)
    both count, and the pod's spec is the default. Never less than 1 s.
    """
    grace = status.grace_period
    overridden = False
    deletion_grace = pod.metadata.deletion_grace_period_seconds if pod.metadata else None
    if deletion_grace is not None and (grace == 0 or deletion_grace < grace):
        grace, overridden = deletion_grace, True
    override = options.grace_period_override if options is not None else None
    if override is not None and (grace == 0 or override < grace):
        grace, overridden = override, True
    spec_grace = pod.spec.termination_grace_period_seconds if pod.spec is not None else None
    if not overridden and grace == 0 and spec_grace is not None:
        grace = spec_grace
    grace = max(grace, 1)
    return grace, status.grace_period not in (0, grace)


class PodWorkers:
    """Owns the per-pod workers and answers "may this pod still be running?"."""

    def __init__(
        self,
        syncer: PodSyncer,
        cache: PodCache,
        *,
        resync_interval: float = DEFAULT_RESYNC_INTERVAL,
        backoff_period: float = DEFAULT_BACKOFF_PERIOD,
        work_queue: WorkQueue | None = None,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._syncer = syncer
        self._cache = cache
        self.resync_interval = resync_interval
        self.backoff_period = backoff_period
        self._clock = clock
        self._rand = rand
        self.work_queue = work_queue if work_queue is not None else WorkQueue(clock)
        self._statuses: dict[str, _PodSyncStatus] = {}
        self._signals: dict[str, _WorkerSignal] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._started_static_by_fullname: dict[str, str] = {}
        self._waiting_static_by_fullname: dict[str, list[str]] = {}
        # Set by the first sync_known_pods: from then on every pod that should
        # exist has been handed to update_pod, so an unknown UID is not running.
        self._pods_synced = False
        metrics.track_table("pod_workers", self.tracked_pods)

    def tracked_pods(self) -> int:
        """Pods the workers track (the ``pykubelet_tracked_pods`` gauge: leak checks)."""
        return len(self._statuses)

    # ----- queries used by the rest of the kubelet -----

    def is_pod_known_terminated(self, uid: str) -> bool:
        """True once all containers of ``uid`` are known stopped (terminating succeeded)."""
        status = self._statuses.get(uid)
        return status is not None and status.is_terminated

    def is_pod_terminated(self, uid: str) -> bool:
        """Same as ``is_pod_known_terminated``: an unknown UID is not reported terminated."""
        return self.is_pod_known_terminated(uid)

    def could_have_running_containers(self, uid: str) -> bool:
        status = self._statuses.get(uid)
        if status is not None:
            return not status.is_terminated
        return not self._pods_synced

    def should_pod_be_finished(self, uid: str) -> bool:
        status = self._statuses.get(uid)
        if status is not None:
            return status.finished
        return self._pods_synced

    def is_pod_termination_requested(self, uid: str) -> bool:
        """True from the kill (deletion, eviction, terminal phase) until the UID is forgotten."""
        status = self._statuses.get(uid)
        return status is not None and status.is_termination_requested

    def should_pod_runtime_be_removed(self, uid: str) -> bool:
        status = self._statuses.get(uid)
        if status is not None:
            return status.is_terminated
        return self._pods_synced

    def should_pod_content_be_removed(self, uid: str) -> bool:
        """Whether volumes, directories and other pod content may be deleted now."""
        status = self._statuses.get(uid)
        if status is not None:
            return status.evicted or (status.deleted and status.is_terminated)
        return self._pods_synced

    def is_pod_for_mirror_pod_terminating_by_full_name(self, full_name: str) -> bool:
        uid = self._started_static_by_fullname.get(full_name)
        status = self._statuses.get(uid) if uid is not None else None
        return (status is not None and status.is_termination_requested
                and not status.is_terminated)

    def abnormal_termination(self, uid: str) -> KillPodOptions | None:
        """The latest kill request with options (eviction...) for ``uid``, if any.

        ``sync_terminating_pod`` applies its ``pod_status_func`` to the final
        API status: the seam's signature has no room for it.
        """
        status = self._statuses.get(uid)
        if status is None or not status.abnormal_terminations:
            return None
        return status.abnormal_terminations[-1]

    def active_pod(self, uid: str) -> V1Pod | None:
        """The spec the worker is reconciling towards, once it has started the pod."""
        status = self._statuses.get(uid)
        if status is None or status.active_update is None:
            return None
        return status.active_update.pod

    # ----- updates -----

    def update_pod(self, options: UpdatePodOptions) -> None:
        """Hand a change to the pod's worker, starting the worker if needed; never blocks.

        Must be called from the event loop thread. In order: which pod the change is
        for, its lifecycle status (created on first sight), the spec to act on, whether
        the change starts termination, what kill options still mean, then the worker
        is woken with it as the pending update; a sync in flight is cancelled when
        termination starts or its grace period shrinks.
        """
        target = self._update_target(options)
        if target is None:
            return
        options, uid, ref, is_runtime_pod = (target.options, target.uid, target.ref,
                                             target.is_runtime_pod)
        now = self._clock()
        status, first_time = self._status_for_update(target, now)
        pod = self._pod_for_update(status, options, is_runtime_pod)

        if (not first_time and status.is_termination_requested
                and options.update_type == SyncPodType.CREATE):
            status.restart_requested = True
            klog.v(4).info("Pod is terminating but has been requested to restart with same UID, "
                           "will be reconciled later", pod=ref, podUID=uid)
            return

        if status.finished:
            klog.v(4).info("Pod is finished processing, no further updates", pod=ref, podUID=uid,
                           updateType=options.update_type)
            return

        became_terminating = self._begin_termination(status, pod, options, is_runtime_pod,
                                                     now=now, ref=ref, uid=uid)
        grace_shortened = self._settle_kill_options(status, pod, options, is_runtime_pod,
                                                    ref=ref, uid=uid)
        if grace_shortened is None:
            return
        self._deliver_update(uid, pod, status, options, ref=ref)
        if (became_terminating or grace_shortened) and status.in_flight is not None:
            klog.v(3).info("Cancelling current pod sync", pod=ref, podUID=uid,
                           workType=status.work_type())
            status.in_flight.cancel()

    @staticmethod
    def _update_target(options: UpdatePodOptions) -> _UpdateTarget | None:
        """The change copied (the caller's object is never kept) and the pod it is for;
        None when it is to be ignored (an orphan can only be killed)."""
        options = replace(options)
        if options.kill_pod_options is not None:
            options.kill_pod_options = replace(options.kill_pod_options)
        is_runtime_pod = False
        running = options.running_pod
        if running is not None and options.pod is None:
            if options.update_type != SyncPodType.KILL:
                klog.info("Pod update is ignored, runtime pods can only be killed",
                          pod=f"{running.namespace}/{running.name}", podUID=running.id,
                          updateType=options.update_type)
                return None
            uid, namespace, name = running.id, running.namespace, running.name
            is_runtime_pod = True
        elif options.pod is not None:
            if running is not None:
                options.running_pod = None
            meta = options.pod.metadata or V1ObjectMeta()
            uid, namespace, name = pod_uid(options.pod), meta.namespace or "", meta.name or ""
        else:
            raise ValueError("UpdatePodOptions needs a pod or a running_pod")
        return _UpdateTarget(options, uid, namespace, name, is_runtime_pod)

    def _status_for_update(self, target: _UpdateTarget, now: float
                           ) -> tuple[_PodSyncStatus, bool]:
        """The UID's lifecycle status, and whether it was seen for the first time now."""
        uid, options = target.uid, target.options
        status = self._statuses.get(uid)
        if status is not None:
            return status, False
        klog.v(4).info("Pod is being synced for the first time", pod=target.ref, podUID=uid,
                       updateType=options.update_type)
        status = _PodSyncStatus(fullname=build_pod_full_name(target.name, target.namespace),
                                synced_at=now)
        if options.pod is not None and _pod_phase(options.pod) in _TERMINAL_PHASES:
            cached, error = self._cache.get(uid)
            if error is None and cached is not None and _is_cached_status_terminal(cached):
                # Seen first after a kubelet restart, already terminal in
                # both config and runtime: only the terminated step is left
                # to do, and the pod must not count as active meanwhile.
                status = _PodSyncStatus(fullname=status.fullname, synced_at=now,
                                        terminating_at=now, terminated_at=now,
                                        started_terminating=True)
        self._statuses[uid] = status
        return status, True

    @staticmethod
    def _pod_for_update(status: _PodSyncStatus, options: UpdatePodOptions,
                        is_runtime_pod: bool) -> V1Pod:
        """The spec the change acts on: an orphan's kill takes the latest real spec known
        for its UID (and stops being an orphan's), else a placeholder built from the
        runtime's listing."""
        pod = options.pod
        if is_runtime_pod:
            running = options.running_pod
            assert running is not None
            status.observed_runtime = True
            if status.pending_update is not None and status.pending_update.pod is not None:
                pod = options.pod = status.pending_update.pod
                options.running_pod = None
            elif status.active_update is not None and status.active_update.pod is not None:
                pod = options.pod = status.active_update.pod
                options.running_pod = None
            else:
                pod = _runtime_pod_to_api_pod(running)
        assert pod is not None
        return pod

    @staticmethod
    def _begin_termination(status: _PodSyncStatus, pod: V1Pod, options: UpdatePodOptions,
                           is_runtime_pod: bool, *, now: float, ref: str, uid: str) -> bool:
        """Whether this change starts the pod's termination (orphaned, deleted, terminal,
        or killed), recording why; a pod already terminating stays so."""
        if status.is_termination_requested:
            return False
        meta = pod.metadata or V1ObjectMeta()
        if is_runtime_pod:
            klog.v(4).info("Pod is orphaned and must be torn down", pod=ref, podUID=uid)
            status.deleted = True
        elif meta.deletion_timestamp is not None:
            klog.v(4).info("Pod is marked for graceful deletion, begin teardown", pod=ref,
                           podUID=uid)
            status.deleted = True
        elif _pod_phase(pod) in _TERMINAL_PHASES:
            klog.v(4).info("Pod is in a terminal phase (success/failed), begin teardown",
                           pod=ref, podUID=uid)
        elif options.update_type == SyncPodType.KILL:
            if options.kill_pod_options is not None and options.kill_pod_options.evict:
                klog.v(4).info("Pod is being evicted by the kubelet, begin teardown",
                               pod=ref, podUID=uid)
                status.evicted = True
            else:
                klog.v(4).info("Pod is being removed by the kubelet, begin teardown",
                               pod=ref, podUID=uid)
        else:
            return False
        status.terminating_at = now
        return True

    def _settle_kill_options(self, status: _PodSyncStatus, pod: V1Pod,
                             options: UpdatePodOptions, is_runtime_pod: bool, *,
                             ref: str, uid: str) -> bool | None:
        """What the change's kill options mean in the pod's phase: answered at once once
        terminated, the grace period in force while terminating, nothing while running.
        Returns whether the grace period shrank, or None when the change is to be
        dropped (an orphan's kill for a pod whose worker is finishing on its own)."""
        if status.is_terminated:
            if is_runtime_pod:
                # Housekeeping may act on a runtime listing older than the
                # termination; the worker will finish on its own.
                klog.v(3).info("Pod is waiting for termination, ignoring runtime-only kill until "
                               "after pod worker is fully terminated", pod=ref, podUID=uid)
                return None
            self._signal_kill_completed(options.kill_pod_options)
            options.kill_pod_options = None
            return False
        if status.is_termination_requested:
            grace, grace_shortened = _effective_grace_period(status, pod,
                                                             options.kill_pod_options)
            status.grace_period = grace
            if options.kill_pod_options is not None:
                status.abnormal_terminations.append(options.kill_pod_options)
            else:
                options.kill_pod_options = KillPodOptions()
            options.kill_pod_options.grace_period_override = grace
            return grace_shortened
        if options.kill_pod_options is not None:
            # Kill options mean nothing to a pod that keeps running.
            self._signal_kill_completed(options.kill_pod_options)
            options.kill_pod_options = None
        return False

    def _deliver_update(self, uid: str, pod: V1Pod, status: _PodSyncStatus,
                        options: UpdatePodOptions, *, ref: str) -> None:
        """Start the UID's worker if it has none, park the change as its pending update
        (replacing an older one, keeping the older start time), and wake it."""
        signal = self._signals.get(uid)
        if signal is None:
            signal = self._signals[uid] = _WorkerSignal()
            if is_static_pod(pod):
                self._waiting_static_by_fullname.setdefault(status.fullname, []).append(uid)
            task = asyncio.get_running_loop().create_task(
                self._worker_loop(uid, signal), name=f"pod-worker-{uid}")
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._worker_done, uid, signal))

        pending = status.pending_update
        if pending is not None and pending.start_time and pending.start_time < options.start_time:
            options.start_time = pending.start_time
        status.pending_update = options
        status.working = True
        klog.v(4).info("Notifying pod of pending update", pod=ref, podUID=uid,
                       workType=status.work_type())
        signal.notify()

    async def terminate_pod_abnormally_and_wait(
        self, pod: V1Pod, *, grace_period_override: int | None = None,
        pod_status_func: PodStatusFunc | None = None, evict: bool = False,
    ) -> None:
        """Kill ``pod`` outside its normal lifecycle and wait until it is terminated.

        Waits 1.5 times the grace period, at least 10 s, then raises TimeoutError.
        """
        grace = grace_period_override
        if grace is None and pod.spec is not None:
            grace = pod.spec.termination_grace_period_seconds
        timeout = max(10.0, (grace or 0) * 1.5)
        completed = asyncio.Event()
        self.update_pod(UpdatePodOptions(
            update_type=SyncPodType.KILL, pod=pod,
            kill_pod_options=KillPodOptions(pod_status_func=pod_status_func,
                                            grace_period_override=grace_period_override,
                                            evict=evict, completed=completed)))
        try:
            await asyncio.wait_for(completed.wait(), timeout)
        except TimeoutError:
            raise TimeoutError("timeout waiting to terminate pod abnormally") from None

    def sync_known_pods(self, desired_uids: Iterable[str]) -> dict[str, PodWorkerSync]:
        """Housekeeping: drive undesired pods to termination and forget finished ones.

        ``desired_uids`` may be a ``{uid: V1Pod}`` mapping. The result describes
        every worker still remembered; a desired pod missing from it has been
        forgotten and the caller should send it again as a CREATE.
        """
        known = set(desired_uids)
        self._pods_synced = True
        workers: dict[str, PodWorkerSync] = {}
        for uid, status in list(self._statuses.items()):
            orphan = uid not in known
            if (status.restart_requested or orphan) and self._remove_terminated_worker(
                    uid, status, orphan):
                continue
            update = status.active_update or status.pending_update
            config = update.pod if update is not None else None
            workers[uid] = PodWorkerSync(
                state=status.work_type(), orphan=orphan, has_config=config is not None,
                static=config is not None and is_static_pod(config))
        return workers

    async def stop(self) -> None:
        """Cancel every worker (and the sync it runs) and wait for them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._signals.clear()

    # ----- the worker -----

    async def _worker_loop(self, uid: str, signal: _WorkerSignal) -> None:
        """One pod's worker: each pending update in turn, synced then completed, until
        the pod is terminated (or was only an orphan to tear down) or it can never
        start."""
        progress = _WorkerProgress()
        while await signal.next():
            work = self._start_pod_sync(uid)
            if work is None:
                continue
            if not work.can_ever_start:
                return
            if not work.can_start:
                continue
            update = work.update
            ref = (f"{update.running_pod.namespace}/{update.running_pod.name}"
                   if update.running_pod is not None else self._ref(update.pod))
            klog.v(4).info("Processing pod event", pod=ref, podUID=uid,
                           updateType=work.work_type)
            outcome = await self._sync_work(uid, work, progress)
            if self._finish_work(uid, work, outcome, ref=ref):
                return

    async def _sync_work(self, uid: str, work: _Work, progress: _WorkerProgress
                         ) -> _SyncOutcome:
        """The syncer call for the work's phase, on a cached runtime status newer than
        the previous sync's end; ``progress`` moves on whatever the outcome."""
        update, work_type, status = work.update, work.work_type, work.status
        pod = update.pod
        try:
            pod_status = PodStatus(id=uid)
            if update.running_pod is None:
                # Orphans skip this: they are only torn down, from the listing. On the
                # way to (or out of) terminating the PLEG is asked to relist now, so
                # that a kill does not first wait out a relist period. A sync still
                # waiting here when termination is requested is cancelled like one
                # that already runs: the kill must not queue behind a relist period.
                cached, cache_error = await self._interruptible(
                    status, self._cache.get_newer_than(
                        uid, progress.last_sync_time,
                        refresh=work_type != PodWorkerState.SYNC))
                if cache_error is not None:
                    raise cache_error
                if cached is not None:
                    pod_status = cached
            is_terminal = False
            if work_type == PodWorkerState.TERMINATED:
                assert pod is not None
                await self._interruptible(status,
                                          self._syncer.sync_terminated_pod(pod, pod_status))
            elif work_type == PodWorkerState.TERMINATING:
                options = update.kill_pod_options
                grace = options.grace_period_override if options is not None else None
                self._acknowledge_terminating(uid)
                if update.running_pod is not None:
                    await self._interruptible(
                        status, self._syncer.sync_terminating_runtime_pod(update.running_pod))
                else:
                    assert pod is not None
                    await self._interruptible(
                        status, self._syncer.sync_terminating_pod(pod, pod_status, grace))
            else:
                assert pod is not None
                is_terminal = await self._interruptible(status, self._syncer.sync_pod(
                    update.update_type, pod, update.mirror_pod, pod_status))
            progress.last_sync_time = self._clock()
            if work_type == PodWorkerState.SYNC and not progress.synced_once:
                # The first sync that went through started the pod's sandbox and
                # containers; the status that reports them running needs the PLEG
                # to see them. Asked now, after last_sync_time is taken (so that
                # look counts as newer), it reports the pod Running as soon as its
                # containers run instead of up to a relist period later.
                progress.synced_once = True
                self._cache.request_refresh()
            return _SyncOutcome(is_terminal=is_terminal)
        except _SyncInterrupted as err:
            progress.last_sync_time = self._clock()
            return _SyncOutcome(error=err, interrupted=True)
        except Exception as err:
            progress.last_sync_time = self._clock()
            return _SyncOutcome(error=err)

    def _finish_work(self, uid: str, work: _Work, outcome: _SyncOutcome, *, ref: str) -> bool:
        """Record the sync's outcome: a phase finished moves the pod on, anything else
        is requeued. True when the worker is done (terminated, or an orphan torn down)."""
        update, work_type = work.update, work.work_type
        if update.start_time and not outcome.interrupted:
            metrics.POD_WORKER_DURATION.labels(str(update.update_type)).observe(
                max(0.0, self._clock() - update.start_time))
        phase_transition = False
        if outcome.interrupted:
            # The change that caused the cancellation is already pending.
            klog.v(2).info("Sync exited with context cancellation error", pod=ref,
                           podUID=uid, updateType=work_type)
        elif outcome.error is not None:
            klog.error("Error syncing pod, skipping", outcome.error, pod=ref, podUID=uid)
        elif work_type == PodWorkerState.TERMINATED:
            self._complete_terminated(uid)
            klog.v(4).info("Processing pod event done", pod=ref, podUID=uid,
                           updateType=work_type)
            return True
        elif work_type == PodWorkerState.TERMINATING:
            if update.running_pod is not None:
                self._complete_terminating_runtime_pod(uid)
                klog.v(4).info("Processing pod event done", pod=ref, podUID=uid,
                               updateType=work_type)
                return True
            self._complete_terminating(uid)
            phase_transition = True
        elif outcome.is_terminal:
            klog.v(4).info("Pod is terminal", pod=ref, podUID=uid, updateType=work_type)
            self._complete_sync(uid)
            phase_transition = True

        self._complete_work(uid, phase_transition, outcome.error)
        klog.v(4).info("Processing pod event done", pod=ref, podUID=uid,
                       updateType=work_type)
        return False

    async def _interruptible(self, status: _PodSyncStatus, call: Coroutine[Any, Any, T]) -> T:
        """Run a syncer call that ``update_pod`` may cancel when termination must preempt it."""
        task: asyncio.Future[T] = asyncio.ensure_future(call)
        status.in_flight = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the worker itself is being stopped
            raise _SyncInterrupted("pod sync cancelled") from None
        finally:
            status.in_flight = None

    def _start_pod_sync(self, uid: str) -> _Work | None:
        """Take the pending update, deciding whether the pod may (ever) start."""
        status = self._statuses.get(uid)
        if status is None:
            klog.v(4).info("Pod worker no longer has status, worker should exit", podUID=uid)
            return None
        if status.pending_update is None:
            status.working = False
            return None
        work_type = status.work_type()
        update, status.pending_update = status.pending_update, None

        if status.is_started or (update.running_pod is not None
                                 and work_type == PodWorkerState.TERMINATING):
            status.merge_last_update(update)
            return _Work(status, update, work_type, True, True)
        if update.pod is None:
            status.merge_last_update(update)
            klog.v(4).info("Running pod cannot start ever, programmer error", podUID=uid)
            self._close_worker(uid)
            return _Work(status, update, work_type, False, False)

        can_start, can_ever_start = self._allow_pod_start(update.pod, status)
        if not can_ever_start:
            self._cleanup_unstarted_pod(uid, status)
            klog.v(4).info("Pod cannot start ever", pod=self._ref(update.pod), podUID=uid)
            return _Work(status, update, work_type, False, False)
        if not can_start:
            status.pending_update = update
            status.working = False
            klog.v(4).info("Pod cannot start yet", pod=self._ref(update.pod), podUID=uid)
            return _Work(status, update, work_type, False, True)
        status.started_at = self._clock()
        status.merge_last_update(update)
        return _Work(status, update, work_type, True, True)

    def _allow_pod_start(self, pod: V1Pod, status: _PodSyncStatus) -> tuple[bool, bool]:
        if not is_static_pod(pod):
            # Even when killed before its first sync, a regular pod goes
            # through terminating: it may have containers from before a
            # kubelet restart.
            return True, True
        if status.is_termination_requested:
            return False, False
        if not self._allow_static_pod_start(status.fullname, pod_uid(pod)):
            self.work_queue.enqueue_after(pod_uid(pod), jitter(
                self.backoff_period, BACKOFF_JITTER_FACTOR, self._rand))
            return False, True
        return True, True

    def _allow_static_pod_start(self, fullname: str, uid: str) -> bool:
        """Static pods with one full name start one at a time, in arrival order.

        Editing a static pod file gives the pod a new UID under the same
        name; the new pod must wait until the old one is gone, or both would
        compete for the same ports and host resources.
        """
        started_uid = self._started_static_by_fullname.get(fullname)
        if started_uid is not None:
            return started_uid == uid
        waiting = self._waiting_static_by_fullname.get(fullname, [])
        while waiting:
            candidate = waiting[0]
            status = self._statuses.get(candidate)
            if status is None or status.is_termination_requested or status.is_terminated:
                waiting.pop(0)
                continue
            if candidate != uid:
                return False
            waiting.pop(0)
            break
        if not waiting:
            self._waiting_static_by_fullname.pop(fullname, None)
        self._started_static_by_fullname[fullname] = uid
        return True

    def _acknowledge_terminating(self, uid: str) -> None:
        status = self._statuses.get(uid)
        if status is not None and status.is_termination_requested and \
                not status.started_terminating:
            klog.v(4).info("Pod worker has observed request to terminate", podUID=uid)
            status.started_terminating = True

    def _complete_sync(self, uid: str) -> None:
        """sync_pod reported a terminal phase: move to terminating right away."""
        status = self._statuses.get(uid)
        if status is None:
            return
        if status.terminating_at is None:
            status.terminating_at = self._clock()
        status.started_terminating = True
        self._requeue_last_update(uid, status)

    def _complete_terminating(self, uid: str) -> None:
        status = self._statuses.get(uid)
        if status is None:
            return
        klog.v(4).info("Pod terminated all containers successfully", podUID=uid)
        status.terminated_at = self._clock()
        for termination in status.abnormal_terminations:
            self._signal_kill_completed(termination)
        self._requeue_last_update(uid, status)

    def _complete_terminating_runtime_pod(self, uid: str) -> None:
        """An orphan is stopped: it has no API object, so nothing is left to remember."""
        klog.v(4).info("Pod terminated all orphaned containers successfully and worker can "
                       "now stop", podUID=uid)
        self._close_worker(uid)
        status = self._statuses.pop(uid, None)
        if status is None:
            return
        status.terminated_at = self._clock()
        status.finished = True
        status.working = False
        self._forget_static(status.fullname, uid)

    def _complete_terminated(self, uid: str) -> None:
        klog.v(4).info("Pod is complete and the worker can now stop", podUID=uid)
        self._close_worker(uid)
        status = self._statuses.get(uid)
        if status is None:
            return
        status.finished = True
        status.working = False
        self._forget_static(status.fullname, uid)

    def _cleanup_unstarted_pod(self, uid: str, status: _PodSyncStatus) -> None:
        self._close_worker(uid)
        status.finished = True
        status.working = False
        status.terminated_at = self._clock()
        self._forget_static(status.fullname, uid)

    def _complete_work(self, uid: str, phase_transition: bool,
                       error: BaseException | None) -> None:
        if phase_transition:
            delay = 0.0
        elif error is None:
            delay = jitter(self.resync_interval, RESYNC_JITTER_FACTOR, self._rand)
        elif NETWORK_NOT_READY_ERROR_MSG in str(error):
            delay = jitter(NETWORK_NOT_READY_BACKOFF, BACKOFF_JITTER_FACTOR, self._rand)
        else:
            delay = jitter(self.backoff_period, BACKOFF_JITTER_FACTOR, self._rand)
        self.work_queue.enqueue_after(uid, delay)

        status = self._statuses.get(uid)
        if status is None:
            return
        if status.pending_update is not None:
            signal = self._signals.get(uid)
            if signal is not None:
                signal.notify()
        else:
            status.working = False

    def _requeue_last_update(self, uid: str, status: _PodSyncStatus) -> None:
        """Replay the last update so the next phase runs without waiting for a new event."""
        if status.pending_update is not None or status.active_update is None:
            return
        status.pending_update = replace(status.active_update)
        status.working = True
        signal = self._signals.get(uid)
        if signal is not None:
            signal.notify()

    def _remove_terminated_worker(self, uid: str, status: _PodSyncStatus, orphan: bool) -> bool:
        """Forget a finished UID; push an unfinished orphan towards termination instead."""
        if not status.finished:
            if not orphan:
                klog.v(4).info("Pod worker has been requested for removal but is still not "
                               "fully terminated", podUID=uid)
                return False
            status.deleted = True
            if not status.is_started and not status.observed_runtime:
                # Never started, never seen in the runtime: nothing to stop.
                klog.v(4).info("Pod is orphaned and has not been started", podUID=uid)
            elif not status.is_termination_requested:
                status.terminating_at = self._clock()
                active = status.active_update
                if active is not None and active.pod is not None:
                    status.grace_period, _ = _effective_grace_period(status, active.pod, None)
                else:
                    status.grace_period = 1
                self._requeue_last_update(uid, status)
                klog.v(4).info("Pod is orphaned and still running, began terminating",
                               podUID=uid)
                return False
            else:
                self._requeue_last_update(uid, status)
                klog.v(4).info("Pod is orphaned and still terminating, notified the pod worker",
                               podUID=uid)
                return False

        if status.restart_requested:
            klog.v(4).info("Pod has been terminated but another pod with the same UID was "
                           "created, remove history to allow restart", podUID=uid)
        else:
            klog.v(4).info("Pod has been terminated and is no longer known to the kubelet, "
                           "remove all history", podUID=uid)
        del self._statuses[uid]
        self._close_worker(uid)
        self._forget_static(status.fullname, uid)
        return True

    # ----- helpers -----

    def _close_worker(self, uid: str) -> None:
        signal = self._signals.pop(uid, None)
        if signal is not None:
            signal.close()

    def _forget_static(self, fullname: str, uid: str) -> None:
        if self._started_static_by_fullname.get(fullname) == uid:
            del self._started_static_by_fullname[fullname]

    @staticmethod
    def _signal_kill_completed(options: KillPodOptions | None) -> None:
        if options is not None and options.completed is not None:
            options.completed.set()

    def _worker_done(self, uid: str, signal: _WorkerSignal, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        # A bug in the worker itself (not a failed sync, which the loop catches)
        # must not leave the pod stuck: forget the dead worker so that the next
        # update starts a new one, and have the sync loop send that update
        # after the usual back-off, as for a failed sync.
        klog.exception("Pod worker crashed; the pod is retried after back-off", error,
                       podUID=uid, worker=task.get_name())
        if self._signals.get(uid) is signal:
            del self._signals[uid]
        status = self._statuses.get(uid)
        if status is not None:
            status.working = False
            status.in_flight = None
        self.work_queue.enqueue_after(
            uid, jitter(self.backoff_period, BACKOFF_JITTER_FACTOR, self._rand))

    @staticmethod
    def _ref(pod: V1Pod | None) -> str:
        if pod is None or pod.metadata is None:
            return ""
        return f"{pod.metadata.namespace or ''}/{pod.metadata.name or ''}"
