"""The probe manager: one worker per container and probe type (upstream ``prober_manager.go``).

The kubelet tells the manager which pods exist (``add_pod``, ``remove_pod``,
``clean_up_pods``) and when a pod starts terminating
(``stop_liveness_and_startup``); the manager starts and stops ``ProbeWorker``
tasks accordingly. Workers write their verdicts into the three
``ResultsManager`` instances the manager was given, which the runtime manager
(liveness, startup: kill and restart) and the status computation
(``update_pod_status``: ``started`` and ``ready``) read back.

Containers probed are the app containers and the restartable init containers
(sidecars), as upstream. Changing a pod's probes is not supported, as
upstream: a worker keeps the probe spec it was created with.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable

from kubernetes_asyncio.client import V1Container, V1ContainerStatus, V1Pod, V1PodStatus

from pykubelet import metrics
from pykubelet.container import ContainerID, ProbeResult
from pykubelet.container.helpers import is_restartable_init_container
from pykubelet.prober.results import ResultsManager
from pykubelet.prober.worker import (
    DEFAULT_PERIOD_SECONDS,
    Clock,
    ProberLike,
    ProbeType,
    ProbeWorker,
    Sleep,
    StatusProvider,
    is_running,
    pod_uid,
)
from pykubelet.util import klog

__all__ = ["ProbeManager", "ProbeType", "ProberLike"]

WorkerKey = tuple[str, str, ProbeType]


def probed_containers(pod: V1Pod) -> list[V1Container]:
    """App containers and sidecars: the containers that may carry running probes."""
    spec = pod.spec
    if spec is None:
        return []
    sidecars = [c for c in spec.init_containers or [] if is_restartable_init_container(c)]
    return [*(spec.containers or []), *sidecars]


def _parse_id(container_status: V1ContainerStatus) -> ContainerID | None:
    if not container_status.container_id:
        return None
    try:
        return ContainerID.parse(container_status.container_id)
    except ValueError:
        return None


class ProbeManager:
    """Starts, stops and answers for the probe workers of every pod.

    ``status_provider`` returns the latest API status of a pod by uid (the
    status manager's cache): workers read container ids, states and
    ``started`` from it. ``clock`` is wall-clock Unix seconds (container start
    times are wall-clock), ``sleep`` waits that many seconds of it, and
    ``jitter`` draws the random fraction of a period a worker waits before its
    first probe while the kubelet has just started; all three exist so tests
    can run workers on a fake clock.
    """

    def __init__(
        self,
        prober: ProberLike,
        *,
        liveness: ResultsManager,
        readiness: ResultsManager,
        startup: ResultsManager,
        status_provider: StatusProvider,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
        jitter: Clock = random.random,
    ) -> None:
        self.prober = prober
        self.liveness = liveness
        self.readiness = readiness
        self.startup = startup
        self._status_provider = status_provider
        self._clock = clock
        self._sleep = sleep
        self._jitter = jitter
        self._started_at = clock()
        self._workers: dict[WorkerKey, ProbeWorker] = {}
        self._tasks: dict[ProbeWorker, asyncio.Task[None]] = {}
        self._terminating: set[str] = set()
        metrics.track_table("probe_workers", self.tracked_pods)

    def tracked_pods(self) -> int:
        """Probe workers (one per container and probe; the ``pykubelet_tracked_pods`` gauge)."""
        return len(self._workers)

    def _results_for(self, probe_type: ProbeType) -> ResultsManager:
        if probe_type is ProbeType.LIVENESS:
            return self.liveness
        if probe_type is ProbeType.READINESS:
            return self.readiness
        return self.startup

    # -- worker lifecycle ------------------------------------------------------------

    def add_pod(self, pod: V1Pod) -> None:
        """Start a worker for every probe of the pod's app containers and sidecars."""
        uid = pod_uid(pod)
        for container in probed_containers(pod):
            for probe_type in (ProbeType.STARTUP, ProbeType.READINESS, ProbeType.LIVENESS):
                if probe_type.spec_of(container) is None:
                    continue
                key = (uid, container.name, probe_type)
                if key in self._workers:
                    klog.v(8).info("Probe worker already exists for container",
                                   probeType=probe_type.metric_label, podUID=uid,
                                   containerName=container.name)
                    continue
                self._start_worker(key, pod, container)

    def _start_worker(self, key: WorkerKey, pod: V1Pod, container: V1Container) -> None:
        uid, _, probe_type = key
        spec = probe_type.spec_of(container)
        period = float((spec.period_seconds if spec is not None else None)
                       or DEFAULT_PERIOD_SECONDS)
        jitter = 0.0
        if period > self._clock() - self._started_at:
            # Right after a kubelet (re)start every pod is added at once; spreading
            # the first probes over a period avoids a burst of execs and requests.
            jitter = self._jitter() * period
        worker = ProbeWorker(
            probe_type, pod, container, prober=self.prober,
            results=self._results_for(probe_type), status_provider=self._status_provider,
            is_terminating=self._terminating.__contains__, on_exit=self._worker_exited,
            clock=self._clock, sleep=self._sleep, initial_jitter=jitter)
        self._workers[key] = worker
        self._tasks[worker] = asyncio.get_running_loop().create_task(
            worker.run(), name=f"probe-{probe_type}-{uid}-{container.name}")

    def _worker_exited(self, worker: ProbeWorker) -> None:
        key = (pod_uid(worker.pod), worker.container.name, worker.probe_type)
        # A replacement may already hold the key if the pod was re-added meanwhile.
        if self._workers.get(key) is worker:
            del self._workers[key]
        self._tasks.pop(worker, None)

    def _stop_workers(self, uid: str, containers: Iterable[V1Container],
                      probe_types: Iterable[ProbeType]) -> None:
        wanted = tuple(probe_types)
        for container in containers:
            for probe_type in wanted:
                worker = self._workers.get((uid, container.name, probe_type))
                if worker is not None:
                    worker.stop()

    def stop_liveness_and_startup(self, pod: V1Pod) -> None:
        """The pod is terminating: its probes must no longer kill containers.

        As upstream, only the app containers' workers are stopped; readiness
        workers keep running but report not ready from now on.
        """
        uid = pod_uid(pod)
        self._terminating.add(uid)
        containers = (pod.spec.containers or []) if pod.spec is not None else []
        self._stop_workers(uid, containers, (ProbeType.LIVENESS, ProbeType.STARTUP))
        for container in probed_containers(pod):
            readiness = self._workers.get((uid, container.name, ProbeType.READINESS))
            if readiness is not None:
                readiness.trigger()

    def remove_pod(self, pod: V1Pod) -> None:
        uid = pod_uid(pod)
        self._terminating.discard(uid)
        self._stop_workers(uid, probed_containers(pod), tuple(ProbeType))

    def clean_up_pods(self, desired_uids: set[str]) -> None:
        """Stop the workers of every pod the kubelet no longer wants."""
        for (uid, _, _), worker in list(self._workers.items()):
            if uid not in desired_uids:
                worker.stop()
        self._terminating &= desired_uids

    async def stop(self) -> None:
        """Stop every worker and wait for them (kubelet shutdown)."""
        tasks = list(self._tasks.values())
        for worker in list(self._tasks):
            worker.stop()
        for task in tasks:
            # A worker in the middle of a probe would otherwise hold shutdown for its timeout.
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A task cancelled before its first step never ran its clean-up.
        self._workers.clear()
        self._tasks.clear()

    def worker_count(self) -> int:
        return len(self._workers)

    def has_worker(self, uid: str, container_name: str, probe_type: ProbeType) -> bool:
        return (uid, container_name, probe_type) in self._workers

    # -- status ----------------------------------------------------------------------

    def update_pod_status(self, pod: V1Pod, status: V1PodStatus) -> None:
        """Set ``started`` and ``ready`` of every container status from the probe results.

        A container is started when it runs and its startup probe succeeded (or
        it has none); it is ready when started, running and its readiness probe
        succeeded (or it has none). Non-restartable init containers are ready
        once they exited 0. While the pod terminates no container is ready.
        """
        uid = pod_uid(pod)
        terminating = uid in self._terminating or (
            pod.metadata is not None and pod.metadata.deletion_timestamp is not None)
        for container_status in status.container_statuses or []:
            self._update_container(uid, container_status, terminating)

        init_specs = {c.name: c for c in (pod.spec.init_containers or [])} if pod.spec else {}
        for container_status in status.init_container_statuses or []:
            spec = init_specs.get(container_status.name)
            if spec is None:
                klog.v(4).info("Init container status without a spec", podUID=uid,
                               containerName=container_status.name)
                continue
            if is_restartable_init_container(spec):
                self._update_container(uid, container_status, terminating)
                continue
            container_status.started = self._is_started(uid, container_status)
            terminated = container_status.state.terminated if container_status.state else None
            container_status.ready = terminated is not None and terminated.exit_code == 0

    def _update_container(self, uid: str, container_status: V1ContainerStatus,
                          terminating: bool) -> None:
        started = self._is_started(uid, container_status)
        container_status.started = started
        if not started or terminating:
            container_status.ready = False
            return
        container_id = _parse_id(container_status)
        result = self.readiness.get(container_id) if container_id is not None else None
        if result is ProbeResult.SUCCESS:
            container_status.ready = True
            return
        worker = self._workers.get((uid, container_status.name, ProbeType.READINESS))
        # Without a readiness probe a started container is ready.
        container_status.ready = worker is None
        if worker is not None:
            # The container just became eligible: learn its readiness now, not a period later.
            worker.trigger()

    def _is_started(self, uid: str, container_status: V1ContainerStatus) -> bool:
        if not is_running(container_status):
            return False
        container_id = _parse_id(container_status)
        result = self.startup.get(container_id) if container_id is not None else None
        if result is not None:
            return result is ProbeResult.SUCCESS
        if container_status.started:
            # Already reported started before this instance's worker caught up
            # (upstream's default while ChangeContainerStatusOnKubeletRestart is off).
            return True
        # A startup probe that has not run yet means not started.
        return (uid, container_status.name, ProbeType.STARTUP) not in self._workers
