"""The generic pod lifecycle event generator: periodic relisting of the runtime.

containerd gives the kubelet no reliable push notifications over CRI v1, so,
as upstream's ``GenericPLEG`` does, pykubelet lists every pod and container
once per relist period, compares each container's state with the previous
listing and turns the differences into ``PodLifecycleEvent``s. For every pod
with a change it also fetches the detailed ``PodStatus`` into the pod cache,
then stamps the cache with the relist start time so that pod workers waiting
for fresh state can proceed.

A container that is created, runs and is removed within one relist period
is never seen; the kubelet's periodic resync of every pod is the safety net.

Clock: ``time.monotonic`` by default. Every timestamp PLEG writes into the
cache is compared with the pod workers' "last sync" times, so both must use
one clock, and it must not jump: a wall clock stepped backwards would make
workers wait for a relist "newer" than a time that will not come again.
Upstream gets the same property from Go's monotonic ``time.Time`` readings.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cri_api.v1 import api_pb2

from pykubelet import metrics
from pykubelet.container import (
    Container,
    ContainerState,
    Pod,
    PodLifecycleEvent,
    PodLifecycleEventType,
    PodStatus,
    Runtime,
)
from pykubelet.container.cache import PodCache
from pykubelet.util import klog

# Upstream plegChannelCapacity, plegRelistPeriod and the health threshold.
DEFAULT_CHANNEL_CAPACITY = 1000
DEFAULT_RELIST_PERIOD = 1.0
DEFAULT_RELIST_THRESHOLD = 180.0

# The states PLEG distinguishes: the runtime's, minus "created" (the kubelet
# does not act on created-but-not-started containers, so it counts as
# unknown), plus "non-existent" to describe appearance and removal.
_RUNNING = "running"
_EXITED = "exited"
_UNKNOWN = "unknown"
_NON_EXISTENT = "non-existent"

_PLEG_STATE = {
    ContainerState.CREATED: _UNKNOWN,
    ContainerState.RUNNING: _RUNNING,
    ContainerState.EXITED: _EXITED,
    ContainerState.UNKNOWN: _UNKNOWN,
}


def generate_events(pod_uid: str, container_id: str, old_state: str,
                    new_state: str) -> list[PodLifecycleEvent]:
    """The events that describe one container moving from ``old_state`` to ``new_state``."""
    if old_state == new_state:
        return []
    klog.v(4).info("GenericPLEG", podUID=pod_uid, containerID=container_id,
                   oldState=old_state, newState=new_state)

    def event(kind: PodLifecycleEventType) -> PodLifecycleEvent:
        return PodLifecycleEvent(pod_uid, kind, container_id)

    if new_state == _RUNNING:
        return [event(PodLifecycleEventType.CONTAINER_STARTED)]
    if new_state == _EXITED:
        return [event(PodLifecycleEventType.CONTAINER_DIED)]
    if new_state == _UNKNOWN:
        return [event(PodLifecycleEventType.CONTAINER_CHANGED)]
    if old_state == _EXITED:
        # Its death was reported when it exited; only the removal is news.
        return [event(PodLifecycleEventType.CONTAINER_REMOVED)]
    # Vanished without being seen exited: consumers still need the death.
    return [event(PodLifecycleEventType.CONTAINER_DIED),
            event(PodLifecycleEventType.CONTAINER_REMOVED)]


def _container_state(pod: Pod | None, container_id: str) -> str:
    if pod is None:
        return _NON_EXISTENT
    for container in (*pod.containers, *pod.sandboxes):
        if container.id.id == container_id:
            return _PLEG_STATE.get(container.state, _UNKNOWN)
    return _NON_EXISTENT


def _containers_of(*pods: Pod | None) -> list[Container]:
    """Containers and sandboxes of all given pods, each container id once."""
    seen: set[str] = set()
    result: list[Container] = []
    for pod in pods:
        if pod is None:
            continue
        for container in (*pod.containers, *pod.sandboxes):
            if container.id.id not in seen:
                seen.add(container.id.id)
                result.append(container)
    return result


@dataclass
class _PodRecord:
    old: Pod | None = None
    current: Pod | None = None


class _PodRecords:
    """Per pod UID, the listing that events were last generated from and the new one."""

    def __init__(self) -> None:
        self._records: dict[str, _PodRecord] = {}

    def uids(self) -> list[str]:
        return list(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def old(self, uid: str) -> Pod | None:
        record = self._records.get(uid)
        return record.old if record else None

    def current(self, uid: str) -> Pod | None:
        record = self._records.get(uid)
        return record.current if record else None

    def set_current(self, pods: Iterable[Pod]) -> None:
        for record in self._records.values():
            record.current = None
        for pod in pods:
            self._records.setdefault(pod.id, _PodRecord()).current = pod

    def commit(self, uid: str) -> None:
        """Accept the current listing of ``uid`` as the baseline for the next relist."""
        record = self._records.get(uid)
        if record is None:
            return
        if record.current is None:
            del self._records[uid]
            return
        record.old, record.current = record.current, None


def update_running_pod_and_container_metrics(pods: Iterable[Pod]) -> None:
    """``kubelet_running_pods`` (pods with a running sandbox) and containers by state."""
    running_sandboxes = 0
    by_state = dict.fromkeys((str(state) for state in ContainerState), 0)
    for pod in pods:
        for container in pod.containers:
            by_state[str(container.state)] = by_state.get(str(container.state), 0) + 1
        if any(s.state == ContainerState.RUNNING for s in pod.sandboxes):
            running_sandboxes += 1
    for state, count in by_state.items():
        metrics.RUNNING_CONTAINERS.labels(state).set(count)
    metrics.RUNNING_PODS.set(running_sandboxes)


class GenericPLEG:
    """Relists the runtime every ``relist_period`` seconds and reports container changes."""

    def __init__(
        self,
        runtime: Runtime,
        cache: PodCache,
        relist_period: float = DEFAULT_RELIST_PERIOD,
        relist_threshold: float = DEFAULT_RELIST_THRESHOLD,
        clock: Callable[[], float] = time.monotonic,
        channel_capacity: int = DEFAULT_CHANNEL_CAPACITY,
    ) -> None:
        self._runtime = runtime
        self._cache = cache
        self.relist_period = relist_period
        self.relist_threshold = relist_threshold
        self._clock = clock
        self._events: asyncio.Queue[PodLifecycleEvent] = asyncio.Queue(channel_capacity)
        self._records = _PodRecords()
        self._pods_to_reinspect: dict[str, Pod | None] = {}
        self._relist_lock = asyncio.Lock()
        self._last_relist_time: float | None = None
        self.last_relist_duration = 0.0
        self.relist_count = 0
        self.discarded_events = 0
        # Set by a cache reader that cannot wait for the next period (see request_relist).
        self._relist_requested = asyncio.Event()
        cache.set_refresher(self.request_relist)
        metrics.track_table("pleg", self.tracked_pods)

    def tracked_pods(self) -> int:
        """Pods in the relist's records (the ``pykubelet_tracked_pods`` gauge: leak checks)."""
        return len(self._records)

    @property
    def last_relist_time(self) -> float | None:
        """Start time (PLEG clock) of the last relist that could list the runtime."""
        return self._last_relist_time

    def watch(self) -> asyncio.Queue[PodLifecycleEvent]:
        """The single event stream; the sync loop is its only consumer."""
        return self._events

    def healthy(self) -> tuple[bool, str]:
        """Whether relisting is keeping up; the message explains a failure."""
        if self._last_relist_time is None:
            return False, "pleg has yet to be successful"
        elapsed = self._clock() - self._last_relist_time
        metrics.PLEG_LAST_SEEN.set(time.time() - elapsed)
        if elapsed > self.relist_threshold:
            return False, (f"pleg was last seen active {elapsed:.3f}s ago; "
                           f"threshold is {self.relist_threshold:g}s")
        return True, ""

    async def run(self) -> None:
        """Relist every ``relist_period`` until cancelled (upstream ``wait.Until(relist)``)."""
        while True:
            try:
                await self.relist()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # One bad relist must not end relisting: health would then
                # only degrade after the threshold, with no cause in the log.
                klog.error("GenericPLEG: relist failed", err)
            # The period counts from the end of a relist, so a slow runtime
            # is not hammered with back-to-back listings; a requested relist
            # comes at once (requests made during a relist wait for its end).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._relist_requested.wait(), self.relist_period)

    def request_relist(self) -> None:
        """Relist now rather than at the end of the period.

        For a pod worker that moves a pod to terminating (or terminated) and
        needs the cache newer than its last sync: without this it waits up to
        a relist period before it can even start killing. Requests made at the
        same time share one relist.
        """
        self._relist_requested.set()

    async def relist(self) -> None:
        """List the runtime once, emit events for changes and refresh the cache."""
        async with self._relist_lock:
            klog.v(5).info("GenericPLEG: Relisting")
            # This listing answers every request made so far; later ones need another.
            self._relist_requested.clear()
            started = self._clock()
            if self._last_relist_time is not None:
                metrics.PLEG_RELIST_INTERVAL.observe(started - self._last_relist_time)
            try:
                await self._relist_locked(started)
            finally:
                self.last_relist_duration = self._clock() - started
                metrics.PLEG_RELIST_DURATION.observe(self.last_relist_duration)

    async def _relist_locked(self, timestamp: float) -> None:
        try:
            pods = await self._runtime.get_pods(all_pods=True)
        except Exception as err:
            klog.error("GenericPLEG: Unable to retrieve pods", err)
            return
        self._last_relist_time = timestamp
        self.relist_count += 1
        self._records.set_current(pods)
        update_running_pod_and_container_metrics(pods)

        needs_reinspection: dict[str, Pod | None] = {}
        for uid in self._records.uids():
            old_pod, pod = self._records.old(uid), self._records.current(uid)
            events: list[PodLifecycleEvent] = []
            for container in _containers_of(old_pod, pod):
                cid = container.id.id
                events.extend(generate_events(uid, cid, _container_state(old_pod, cid),
                                              _container_state(pod, cid)))
            if not events and uid not in self._pods_to_reinspect:
                self._records.commit(uid)
                continue

            status, error = await self._update_cache(uid, pod)
            if error is not None:
                # Keep the old record so the same events are generated again
                # next relist, together with the retry of the inspection.
                klog.v(4).info("PLEG: Ignoring events for pod", podUID=uid, err=error)
                needs_reinspection[uid] = pod
                continue
            self._records.commit(uid)
            self._emit(events, status)

        # Only after every changed pod is in the cache may readers be told
        # that the cache is as fresh as this relist.
        self._cache.update_time(timestamp)
        self._pods_to_reinspect = needs_reinspection

    def _emit(self, events: list[PodLifecycleEvent], status: PodStatus | None) -> None:
        exit_codes: dict[str, int] | None = None
        for event in events:
            # ContainerChanged (created/unknown containers) is not reliable
            # enough for anyone to act on; upstream drops it here too.
            if event.type == PodLifecycleEventType.CONTAINER_CHANGED:
                continue
            try:
                self._events.put_nowait(event)
            except asyncio.QueueFull:
                self.discarded_events += 1
                metrics.PLEG_DISCARD_EVENTS.inc()
                klog.error("Event channel is full, discard this relist() cycle event")
            if event.type == PodLifecycleEventType.CONTAINER_DIED and status is not None:
                if exit_codes is None:
                    exit_codes = {s.id.id: s.exit_code for s in status.container_statuses}
                if event.data in exit_codes:
                    klog.v(2).info("Generic (PLEG): container finished", podID=event.pod_uid,
                                   containerID=event.data, exitCode=exit_codes[event.data])

    async def _update_cache(
        self, uid: str, pod: Pod | None
    ) -> tuple[PodStatus | None, BaseException | None]:
        if pod is None:
            # Nothing of the pod is left in the runtime, not even exited
            # containers: the cache answers "no containers" for unknown UIDs.
            klog.v(4).info("PLEG: Delete status for pod", podUID=uid)
            self._cache.delete(uid)
            return None, None
        timestamp = self._clock()
        try:
            status: PodStatus | None = await self._runtime.get_pod_status(
                pod.id, pod.name, pod.namespace)
            error: BaseException | None = None
        except Exception as err:
            status, error = None, err
            klog.error("PLEG: Write status", err, pod=f"{pod.namespace}/{pod.name}")
        if status is not None:
            klog.v(4).info("PLEG: Write status", pod=f"{pod.namespace}/{pod.name}")
            status.ips = self._ips_to_keep(uid, status)
        self._cache.set(pod.id, status, error, timestamp)
        return status, error

    def _ips_to_keep(self, uid: str, status: PodStatus) -> list[str]:
        """Keep a dead pod's last known IPs.

        Network teardown can happen before the final status is read, yet the
        API expects a completed pod to keep reporting the IPs it had.
        """
        if status.ips:
            return status.ips
        previous, error = self._cache.get(uid)
        if error is not None or previous is None or not previous.ips:
            return []
        if any(s.state == api_pb2.SANDBOX_READY for s in status.sandbox_statuses):
            return status.ips
        return list(previous.ips)
