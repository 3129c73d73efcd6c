"""spec.activeDeadlineSeconds: a pod active on the node past its deadline is failed and stopped.

Every test runs on an injected clock: the deadline is decided by
``ActiveDeadlineHandler`` against the start time the kubelet recorded, the sync
tick asks it which pods to sync, status generation asks it whether to fail the
pod, and the pod syncer then ends the pod.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Pod, V1PodStatus

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import SyncPodType
from pykubelet.container import (
    ContainerID,
    ContainerState,
    ContainerStatus,
    Pod,
    PodLifecycleEvent,
    PodStatus,
    PodSyncResult,
)
from pykubelet.events import NORMAL, Event, LoggingRecorder
from pykubelet.kubelet.active_deadline import (
    DEADLINE_EXCEEDED_MESSAGE,
    DEADLINE_EXCEEDED_REASON,
    ActiveDeadlineHandler,
)
from pykubelet.kubelet.pod_sync import KubeletPodSyncer, PodSyncOptions
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.kubelet.sync_loop import LoopInputs, get_pods_to_sync, sync_loop
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.results import ResultsManager, ResultUpdate
from pykubelet.status import ReasonCache, StatusManager, generate_api_pod_status

T0 = datetime(2026, 3, 2, 8, 0, 0, tzinfo=UTC)
UID = "5f0c1d2e-0000-4000-8000-00000000a11d"


class FakeClock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def make_pod(deadline: int | None, *, uid: str = UID, restart_policy: str = "Always",
             started: datetime | None = None) -> V1Pod:
    spec: dict[str, Any] = {"restartPolicy": restart_policy, "terminationGracePeriodSeconds": 7,
                            "containers": [{"name": "app", "image": "registry.local/app:1"}]}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    pod = pod_from_dict({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"job-{uid[-4:]}", "namespace": "default",
                                      "uid": uid},
                         "spec": spec})
    if started is not None:
        pod.status = V1PodStatus(phase="Running", start_time=started)
    return pod


class Deadlines:
    """A handler on a fake clock, with the events it records; it reads the statuses the
    test sets unless given the status provider to read (a status manager's)."""

    def __init__(self, *, clock: FakeClock | None = None,
                 status_provider: Callable[[str], V1PodStatus | None] | None = None) -> None:
        self.clock = clock or FakeClock()
        self.statuses: dict[str, V1PodStatus] = {}
        self.events: list[Event] = []
        recorder = LoggingRecorder()
        recorder.listeners.append(self.events.append)
        self.handler = ActiveDeadlineHandler(status_provider=status_provider or self.statuses.get,
                                             recorder=recorder, clock=self.clock)

    def started(self, pod: V1Pod, at: datetime = T0) -> None:
        self.statuses[pod.metadata.uid] = V1PodStatus(phase="Running", start_time=at)


def test_a_pod_without_a_deadline_runs_for_ever() -> None:
    d = Deadlines()
    pod = make_pod(None)
    d.started(pod)
    d.clock.advance(365 * 24 * 3600)

    assert d.handler.should_sync(pod) is False
    assert d.handler.should_evict(pod).evict is False
    assert d.events == []


def test_the_deadline_counts_from_the_start_time_the_kubelet_recorded() -> None:
    d = Deadlines()
    pod = make_pod(3)
    d.started(pod)

    d.clock.advance(2.999)
    assert d.handler.should_sync(pod) is False
    assert d.handler.should_evict(pod).evict is False
    assert d.events == []

    d.clock.advance(0.001)  # exactly activeDeadlineSeconds after the start: past it
    assert d.handler.should_sync(pod) is True
    verdict = d.handler.should_evict(pod)
    assert (verdict.evict, verdict.reason, verdict.message) == (
        True, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    assert d.events == [Event(f"default/{pod.metadata.name}", NORMAL, "DeadlineExceeded",
                              "Pod was active on the node longer than the specified deadline")]


def test_a_pod_not_started_yet_has_used_none_of_its_deadline() -> None:
    d = Deadlines()
    pod = make_pod(1)
    d.clock.advance(3600)

    assert d.handler.should_sync(pod) is False
    assert d.handler.should_evict(pod).evict is False


def test_before_the_kubelets_first_status_the_start_time_of_the_pod_counts() -> None:
    d = Deadlines()
    pod = make_pod(5, started=T0 - timedelta(seconds=10))  # e.g. after a kubelet restart

    assert d.handler.should_sync(pod) is True


def test_the_kubelets_own_start_time_wins_over_the_pods() -> None:
    d = Deadlines()
    pod = make_pod(5, started=T0 - timedelta(seconds=10))
    d.started(pod, at=T0)

    assert d.handler.should_sync(pod) is False


def test_a_shortened_deadline_counts_at_once() -> None:
    d = Deadlines()
    pod = make_pod(600)
    d.started(pod)
    d.clock.advance(10)
    assert d.handler.should_sync(pod) is False

    pod.spec.active_deadline_seconds = 5  # the update that shortened it

    assert d.handler.should_sync(pod) is True


# -- status generation ---------------------------------------------------------------------


def running(name: str = "app") -> ContainerStatus:
    return ContainerStatus(id=ContainerID("containerd", f"{name}-0"), name=name,
                           state=ContainerState.RUNNING, created_at=1.0,
                           started_at=T0.timestamp(), image="registry.local/app:1")


def exited(name: str = "app", exit_code: int = 137) -> ContainerStatus:
    return ContainerStatus(id=ContainerID("containerd", f"{name}-0"), name=name,
                           state=ContainerState.EXITED, created_at=1.0,
                           started_at=T0.timestamp(), finished_at=T0.timestamp() + 3,
                           exit_code=exit_code, image="registry.local/app:1")


def runtime_status(*containers: ContainerStatus) -> PodStatus:
    return PodStatus(id=UID, name="job", namespace="default", ips=["10.88.0.9"],
                     container_statuses=list(containers))


def test_a_pod_asked_to_be_failed_is_failed_with_that_reason_while_its_containers_run() -> None:
    status = generate_api_pod_status(
        make_pod(3), runtime_status(running()), ReasonCache(), host_ip="10.0.0.1",
        evicted=(DEADLINE_EXCEEDED_REASON, DEADLINE_EXCEEDED_MESSAGE))

    assert (status.phase, status.reason, status.message) == (
        "Failed", DEADLINE_EXCEEDED_REASON, DEADLINE_EXCEEDED_MESSAGE)
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "PodFailed")


def test_a_phase_the_api_already_holds_as_terminal_is_not_rewritten() -> None:
    pod = make_pod(3)
    pod.status = V1PodStatus(phase="Succeeded", start_time=T0)

    status = generate_api_pod_status(
        pod, runtime_status(exited(exit_code=0)), ReasonCache(), host_ip="10.0.0.1",
        pod_is_terminal=True, evicted=(DEADLINE_EXCEEDED_REASON, DEADLINE_EXCEEDED_MESSAGE))

    assert status.phase == "Succeeded"


# -- the pod syncer: a pod past its deadline ends and is stopped ---------------------------


class FakeRuntime:
    runtime_type = "containerd"

    def __init__(self) -> None:
        self.syncs = 0
        self.kills: list[int | None] = []
        self.after_kill = runtime_status(exited())

    async def sync_pod(self, pod: V1Pod, pod_status: PodStatus,
                       pull_secrets: Sequence[object] = ()) -> PodSyncResult:
        self.syncs += 1
        return PodSyncResult()

    async def kill_pod(self, pod: V1Pod | None, running_pod: Pod,
                       grace_period_override: int | None = None) -> None:
        self.kills.append(grace_period_override)

    async def get_pod_status(self, uid: str, name: str, namespace: str) -> PodStatus:
        return self.after_kill


def syncer_for(d: Deadlines, statuses: StatusManager, runtime: FakeRuntime,
               tmp_path: Path) -> KubeletPodSyncer:
    # No container declares a probe: the probe manager starts nothing.
    probes = ProbeManager(None, liveness=ResultsManager(), readiness=ResultsManager(),
                          startup=ResultsManager(), status_provider=statuses.peek_pod_status)
    return KubeletPodSyncer(PodSyncOptions(root_dir=str(tmp_path)), runtime, statuses,
                            ReasonCache(), RuntimeState(), probes, pod_sync_handlers=[d.handler],
                            is_pod_termination_requested=lambda uid: False,
                            abnormal_termination=lambda uid: None)


@pytest.mark.parametrize("restart_policy", ["Always", "OnFailure", "Never"])
async def test_the_sync_after_the_deadline_ends_the_pod_and_its_termination_stops_it(
        tmp_path: Path, restart_policy: str) -> None:
    clock = FakeClock()
    statuses = StatusManager(now=clock)
    d = Deadlines(clock=clock, status_provider=statuses.peek_pod_status)
    runtime = FakeRuntime()
    syncer = syncer_for(d, statuses, runtime, tmp_path)
    pod = make_pod(3, restart_policy=restart_policy)
    statuses.set_pod_status(pod, V1PodStatus(phase="Pending", start_time=T0))

    d.clock.advance(2)
    assert await syncer.sync_pod(SyncPodType.SYNC, pod, None, runtime_status(running())) is False
    assert statuses.get_pod_status(UID).phase == "Running"  # type: ignore[union-attr]
    assert runtime.syncs == 1

    d.clock.advance(1)
    # Terminal: the pod worker moves it to terminating; its containers are not touched here.
    assert await syncer.sync_pod(SyncPodType.SYNC, pod, None, runtime_status(running())) is True
    assert runtime.syncs == 1
    failed = statuses.get_pod_status(UID)
    assert failed is not None
    assert (failed.phase, failed.reason, failed.message) == (
        "Failed", "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline")
    assert [e.reason for e in d.events] == ["DeadlineExceeded"]

    # Termination kills the containers with the pod's own grace period (no override) ...
    await syncer.sync_terminating_pod(pod, runtime_status(running()), None)
    assert runtime.kills == [None]
    await syncer.sync_terminated_pod(pod, runtime.after_kill)
    # ... and the pod stays Failed, whatever its restart policy.
    final = statuses.get_pod_status(UID)
    assert final is not None
    assert (final.phase, final.reason) == ("Failed", "DeadlineExceeded")
    assert final.container_statuses[0].state.terminated is not None
    assert final.start_time == T0


# -- the sync loop: the tick picks the pod up ----------------------------------------------


def test_the_sync_tick_picks_pods_past_their_deadline_besides_the_due_ones() -> None:
    d = Deadlines()
    late, early, due = (make_pod(3, uid=f"{UID[:-4]}000{i}") for i in (1, 2, 3))
    for pod in (late, early, due):
        d.started(pod)
    early.spec.active_deadline_seconds = 60
    d.clock.advance(3)

    picked = get_pods_to_sync(pods=[late, early, due], due_uids=[due.metadata.uid, "gone"],
                              sync_loop_handlers=[d.handler])

    assert [p.metadata.uid for p in picked] == [late.metadata.uid, due.metadata.uid]
    assert get_pods_to_sync(pods=[early], due_uids=[], sync_loop_handlers=[d.handler]) == []


class SyncRecorder:
    """A SyncHandler that only records the pods handed to their workers by a sync."""

    def __init__(self) -> None:
        self.synced: list[str] = []
        self.got_sync = asyncio.Event()

    def handle_pod_syncs(self, pods: list[V1Pod]) -> None:
        self.synced.extend(p.metadata.uid for p in pods)
        self.got_sync.set()

    async def handle_pod_additions(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_updates(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_removes(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_reconcile(self, pods: list[V1Pod]) -> None: ...
    async def handle_pod_cleanups(self) -> None: ...


async def test_the_sync_loop_syncs_a_pod_once_its_deadline_passes_with_no_other_event() -> None:
    d = Deadlines()
    pod = make_pod(3)
    d.started(pod)
    ticks = 0
    ticked = asyncio.Event()

    def pods_to_sync() -> list[V1Pod]:
        nonlocal ticks
        ticks += 1
        ticked.set()
        return get_pods_to_sync(pods=[pod], due_uids=[], sync_loop_handlers=[d.handler])

    results: dict[str, asyncio.Queue[ResultUpdate]] = {
        kind: asyncio.Queue() for kind in ("liveness", "readiness", "startup")}
    pleg: asyncio.Queue[PodLifecycleEvent] = asyncio.Queue()
    inputs = LoopInputs(
        config_updates=asyncio.Queue(), pleg_events=pleg,
        liveness_updates=results["liveness"], readiness_updates=results["readiness"],
        startup_updates=results["startup"], runtime_errors=list,
        pod_by_uid=lambda uid: pod if uid == UID else None, pods_to_sync=pods_to_sync,
        sources_ready=lambda: False, on_probe_update=lambda kind, update: None,
        sync_period=0.01, housekeeping_period=3600)
    handler = SyncRecorder()
    loop = asyncio.create_task(sync_loop(inputs, handler))
    try:
        # Three ticks inside the deadline: nothing to sync.
        while ticks < 3:
            ticked.clear()
            await asyncio.wait_for(ticked.wait(), 5)
        assert handler.synced == []

        d.clock.advance(3)
        await asyncio.wait_for(handler.got_sync.wait(), 5)
        assert handler.synced[0] == UID
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
