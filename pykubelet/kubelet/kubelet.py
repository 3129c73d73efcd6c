"""The ``Kubelet``: pod handlers and the per-pod sync functions.

The sync loop decides *when* a pod needs attention and calls the handlers
here (upstream ``HandlePodAdditions``, ``HandlePodUpdates``...), which hand
the pod to its pod worker. The pod worker later calls back into the three
phase functions (upstream ``SyncPod``, ``SyncTerminatingPod``,
``SyncTerminatedPod``) that compute the API status and drive the runtime.
Housekeeping (``handle_pod_cleanups``) removes what no source wants any more.
"""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
import time
from dataclasses import dataclass, field

from kubernetes_asyncio.client import V1Pod, V1PodStatus

from pykubelet.api import pod_ref, pod_uid
from pykubelet.api.kubetypes import SyncPodType
from pykubelet.cm import ContainerManager
from pykubelet.cm.cgroups import CgroupError
from pykubelet.container import ContainerID, ContainerState, Pod, PodStatus, ProbeResult, Runtime
from pykubelet.container.cache import PodCache
from pykubelet.container.helpers import running_pod_from_status
from pykubelet.events import WARNING, EventRecorder
from pykubelet.eviction import EvictionManager
from pykubelet.kubelet.pod_manager import PodManager
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.kuberuntime.gc import ContainerGC
from pykubelet.podworkers import KillPodOptions, PodWorkers, UpdatePodOptions
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.results import ResultsManager, ResultUpdate
from pykubelet.status import ReasonCache, StatusManager, generate_api_pod_status
from pykubelet.util import klog

TERMINAL_PHASES = ("Succeeded", "Failed")
FAILED_TO_CREATE_POD_CONTAINER = "FailedToCreatePodContainer"


@dataclass
class KubeletOptions:
    node_name: str
    root_dir: str
    host_ip: str = ""
    max_pods: int = 110
    sync_frequency: float = 60.0
    runtime_type: str = "containerd"


@dataclass
class SyncLoopMonitor:
    """When the sync loop last went round; ``/healthz/syncloop`` reads it."""

    last: float = field(default_factory=time.monotonic)
    threshold: float = 300.0
    name: str = "syncloop"

    def beat(self) -> None:
        self.last = time.monotonic()

    def check(self) -> str | None:
        idle = time.monotonic() - self.last
        if idle > self.threshold:
            return f"sync Loop took longer than expected ({idle:.0f}s since its last iteration)"
        return None


class Kubelet:
    def __init__(self, options: KubeletOptions, runtime: Runtime, cache: PodCache,
                 pod_manager: PodManager, status_manager: StatusManager,
                 reason_cache: ReasonCache, runtime_state: RuntimeState,
                 probe_manager: ProbeManager) -> None:
        self.options = options
        self.runtime = runtime
        self.cache = cache
        self.pod_manager = pod_manager
        self.status_manager = status_manager
        self.reason_cache = reason_cache
        self.runtime_state = runtime_state
        self.probe_manager = probe_manager
        # Set by the builder: the workers call back into this object.
        self.pod_workers: PodWorkers | None = None
        # Resource management (set by the builder when present): pod cgroups,
        # eviction admission, the dead container deletor.
        self.container_manager: ContainerManager | None = None
        self.eviction_manager: EvictionManager | None = None
        self.container_gc: ContainerGC | None = None
        self.recorder: EventRecorder | None = None

    # -- directories ---------------------------------------------------------

    def pods_dir(self) -> str:
        return os.path.join(self.options.root_dir, "pods")

    def pod_dir(self, uid: str) -> str:
        return os.path.join(self.pods_dir(), uid)

    def make_pod_data_dirs(self, pod: V1Pod) -> None:
        base = self.pod_dir(pod_uid(pod))
        for sub in ("", "volumes", "plugins", "containers"):
            os.makedirs(os.path.join(base, sub), mode=0o750, exist_ok=True)

    # -- handlers called by the sync loop ----------------------------------------

    def _workers(self) -> PodWorkers:
        assert self.pod_workers is not None, "pod workers are wired by the builder"
        return self.pod_workers

    def handle_pod_additions(self, pods: list[V1Pod]) -> None:
        for pod in sorted(pods, key=_creation_key):
            self.pod_manager.add_pod(pod)
            if self._workers().is_pod_termination_requested(pod_uid(pod)):
                continue
            rejection = self.can_admit_pod(pod)
            if rejection is not None:
                self.reject_pod(pod, *rejection)
                continue
            self.dispatch_work(pod, SyncPodType.CREATE)

    def handle_pod_updates(self, pods: list[V1Pod]) -> None:
        for pod in pods:
            self.pod_manager.update_pod(pod)
            self.dispatch_work(pod, SyncPodType.UPDATE)

    def handle_pod_removes(self, pods: list[V1Pod]) -> None:
        for pod in pods:
            self.pod_manager.remove_pod(pod)
            self._workers().update_pod(UpdatePodOptions(
                update_type=SyncPodType.KILL, pod=pod, start_time=time.monotonic(),
                kill_pod_options=KillPodOptions()))

    def handle_pod_reconcile(self, pods: list[V1Pod]) -> None:
        for pod in pods:
            self.pod_manager.update_pod(pod)

    def handle_pod_syncs(self, pods: list[V1Pod]) -> None:
        for pod in pods:
            self.dispatch_work(pod, SyncPodType.SYNC)

    def dispatch_work(self, pod: V1Pod, update_type: SyncPodType) -> None:
        self._workers().update_pod(UpdatePodOptions(
            update_type=update_type, pod=pod, start_time=time.monotonic()))

    def can_admit_pod(self, pod: V1Pod) -> tuple[str, str] | None:
        """Admission: the node's pod capacity (``maxPods``)."""
        active = [p for p in self.pod_manager.get_pods()
                  if pod_uid(p) != pod_uid(pod) and not self._is_terminal(p)
                  and not self._workers().is_pod_terminated(pod_uid(p))]
        if len(active) >= self.options.max_pods:
            return ("OutOfpods", "Node didn't have enough resource: pods, "
                    f"requested: 1, used: {len(active)}, capacity: {self.options.max_pods}")
        if self.eviction_manager is not None:
            return self.eviction_manager.admit(pod)
        return None

    def active_pods(self) -> list[V1Pod]:
        """Upstream ``GetActivePods``: admitted pods that are not (or not yet) finished."""
        workers = self._workers()
        return [p for p in self.pod_manager.get_pods()
                if not workers.is_pod_terminated(pod_uid(p))
                and (not self._is_terminal(p)
                     or workers.is_pod_termination_requested(pod_uid(p)))]

    def on_container_died(self, uid: str, container_id: str) -> None:
        """The sync loop's ContainerDied seam (upstream ``cleanUpContainersInPod``)."""
        if self.container_gc is not None:
            self.container_gc.container_died(uid, container_id)

    def cached_pod_status(self, uid: str) -> PodStatus | None:
        status, _ = self.cache.get(uid)
        return status

    def reject_pod(self, pod: V1Pod, reason: str, message: str) -> None:
        klog.info("Pod admission denied", pod=pod_ref(pod), reason=reason, message=message)
        self.status_manager.set_pod_status(pod, V1PodStatus(
            phase="Failed", reason=reason, message=f"Pod was rejected: {message}"))

    def _is_terminal(self, pod: V1Pod) -> bool:
        status = self.status_manager.peek_pod_status(pod_uid(pod))
        return status is not None and status.phase in TERMINAL_PHASES

    def pods_to_sync(self) -> list[V1Pod]:
        pods = []
        for uid in self._workers().work_queue.get_work():
            pod = self.pod_manager.get_pod_by_uid(uid)
            if pod is not None:
                pods.append(pod)
        return pods

    def on_probe_update(self, probe_type: str, update: ResultUpdate) -> None:
        """Readiness shows in the cached status at once; the pod sync that follows redoes it."""
        if probe_type == "readiness":
            self.status_manager.set_container_readiness(
                update.pod_uid, str(update.container_id), update.result == ProbeResult.SUCCESS)

    # -- the pod worker's phase functions (pykubelet.podworkers.PodSyncer) -------

    def _api_status(self, pod: V1Pod, status: PodStatus, terminal: bool = False) -> V1PodStatus:
        previous = self.status_manager.get_pod_status(pod_uid(pod))
        api_status = generate_api_pod_status(
            pod, status, self.reason_cache, host_ip=self.options.host_ip,
            pod_is_terminal=terminal, previous=previous,
            readiness=lambda container_id: _succeeded(self.probe_manager.readiness, container_id),
            startup=lambda container_id: _succeeded(self.probe_manager.startup, container_id))
        # A kill with a status of its own (an eviction) shapes every later status.
        abnormal = self._workers().abnormal_termination(pod_uid(pod))
        if abnormal is not None and abnormal.pod_status_func is not None:
            abnormal.pod_status_func(api_status)
        return api_status

    async def sync_pod(self, update_type: SyncPodType, pod: V1Pod, mirror_pod: V1Pod | None,
                       pod_status: PodStatus) -> bool:
        api_status = self._api_status(pod, pod_status)
        self.status_manager.set_pod_status(pod, api_status)
        stored = self.status_manager.get_pod_status(pod_uid(pod)) or api_status
        if stored.phase in TERMINAL_PHASES:
            klog.v(4).info("Pod is terminal, skipping sync", pod=pod_ref(pod), phase=stored.phase)
            return True
        network = self.runtime_state.network_errors()
        if network and not (pod.spec.host_network or False):
            raise RuntimeError(f"network is not ready: {'; '.join(network)}")
        if self.container_manager is not None:
            await self._ensure_pod_cgroup(pod)
        self.make_pod_data_dirs(pod)
        self.probe_manager.add_pod(pod)  # idempotent: probing starts with the first sync
        result = await self.runtime.sync_pod(pod, pod_status)
        self.reason_cache.update(pod_uid(pod), result)
        error = result.error()
        if error is not None:
            raise error
        return False

    async def _ensure_pod_cgroup(self, pod: V1Pod) -> None:
        """The pod's cgroup (and the QoS cgroups it changes) before its sandbox exists."""
        assert self.container_manager is not None
        try:
            await self.container_manager.ensure_pod(pod)
        except CgroupError as err:
            message = f"unable to ensure pod container exists: {err}"
            if self.recorder is not None:
                self.recorder.event(pod, WARNING, FAILED_TO_CREATE_POD_CONTAINER, message)
            self.status_manager.set_pod_status(pod, _with_message(
                self.status_manager.get_pod_status(pod_uid(pod)), FAILED_TO_CREATE_POD_CONTAINER,
                message))
            raise RuntimeError(f"failed to ensure that the pod: {pod_uid(pod)} cgroups exist "
                               f"and are correctly applied: {err}") from err

    async def sync_terminating_pod(self, pod: V1Pod, pod_status: PodStatus,
                                   grace_period: int | None) -> None:
        klog.v(4).info("SyncTerminatingPod enter", pod=pod_ref(pod))
        # A terminating container is never restarted, so its liveness no longer matters.
        self.probe_manager.stop_liveness_and_startup(pod)
        self.status_manager.set_pod_status(pod, self._api_status(pod, pod_status))
        running = running_pod_from_status(pod_status, self.options.runtime_type)
        await self.runtime.kill_pod(pod, running, grace_period)
        after = await self.runtime.get_pod_status(pod_uid(pod), pod.metadata.name,
                                                  pod.metadata.namespace)
        still = [c.name for c in after.container_statuses if c.state == ContainerState.RUNNING]
        if still:
            raise RuntimeError(f"containers still running after kill: {', '.join(still)}")
        self.status_manager.set_pod_status(pod, self._api_status(pod, after, terminal=True))
        klog.v(4).info("SyncTerminatingPod exit", pod=pod_ref(pod))

    async def sync_terminating_runtime_pod(self, running_pod: Pod) -> None:
        klog.info("Killing orphaned pod found in the runtime", podUID=running_pod.id,
                  pod=f"{running_pod.namespace}/{running_pod.name}")
        await self.runtime.kill_pod(None, running_pod, None)

    async def sync_terminated_pod(self, pod: V1Pod, pod_status: PodStatus) -> None:
        self.probe_manager.remove_pod(pod)
        self.status_manager.set_pod_status(pod, self._api_status(pod, pod_status, terminal=True))
        self.status_manager.terminate_pod(pod)

    # -- housekeeping -------------------------------------------------------

    async def handle_pod_cleanups(self) -> None:
        """Upstream ``HandlePodCleanups``: make the node match the sources' wishes."""
        workers = self._workers()
        desired = {pod_uid(p): p for p in self.pod_manager.get_pods()}
        worker_states = workers.sync_known_pods(desired)
        self.status_manager.remove_orphaned_statuses(set(desired))
        self.probe_manager.clean_up_pods(set(desired))
        # A desired pod without a worker was forgotten after a finished
        # termination and wanted again (same UID): give it a fresh start. A pod
        # that admission rejected never had a worker and must not get one here.
        for uid, pod in desired.items():
            if uid not in worker_states and not self._is_terminal(pod):
                self.dispatch_work(pod, SyncPodType.CREATE)

        # One listing serves both clean-ups: pods that still run are killed,
        # pods that have stopped are removed from the runtime.
        for runtime_pod in await self.runtime.get_pods(all_pods=True):
            uid = runtime_pod.id
            if uid in desired:
                continue
            if _still_running(runtime_pod):
                if uid not in worker_states:
                    workers.update_pod(UpdatePodOptions(
                        update_type=SyncPodType.KILL, pod=None, running_pod=runtime_pod,
                        start_time=time.monotonic(), kill_pod_options=KillPodOptions()))
            elif workers.should_pod_runtime_be_removed(uid):
                klog.v(2).info("Removing terminated pod from the runtime", podUID=uid)
                await self.runtime.remove_pod(uid)
                self.cache.delete(uid)

        await asyncio.to_thread(self._remove_orphaned_pod_dirs, set(desired))
        if self.container_manager is not None:
            # Cgroups go once nothing of the pod can run any more.
            keep = {uid for uid in desired if not workers.is_pod_terminated(uid)}
            keep |= {uid for uid in worker_states if workers.could_have_running_containers(uid)}
            removed = await asyncio.to_thread(
                self.container_manager.remove_orphaned_pod_cgroups, keep)
            if removed:
                await self.container_manager.update_qos_cgroups()

    def _remove_orphaned_pod_dirs(self, desired: set[str]) -> None:
        try:
            entries = os.listdir(self.pods_dir())
        except FileNotFoundError:
            return
        workers = self._workers()
        for uid in entries:
            if uid in desired or not workers.should_pod_content_be_removed(uid):
                continue
            klog.v(2).info("Removing directory of a deleted pod", podUID=uid)
            shutil.rmtree(self.pod_dir(uid), ignore_errors=True)

    # -- views ----------------------------------------------------------

    def get_pods(self) -> list[V1Pod]:
        """Desired pods with their latest API status (the read-only ``/pods``)."""
        return [self.status_manager.pod_with_status(pod) for pod in self.pod_manager.get_pods()]


def _with_message(status: V1PodStatus | None, reason: str, message: str) -> V1PodStatus:
    """A pod that cannot start says why in its status; its phase stays what it was."""
    updated = copy.copy(status) if status is not None else V1PodStatus(phase="Pending")
    updated.reason = reason
    updated.message = message
    return updated


def _still_running(pod: Pod) -> bool:
    """A runtime pod with a running container or a ready sandbox still needs a kill."""
    return any(c.state == ContainerState.RUNNING for c in (*pod.containers, *pod.sandboxes))


def _succeeded(results: ResultsManager, container_id: str) -> bool:
    try:
        return results.get(ContainerID.parse(container_id)) == ProbeResult.SUCCESS
    except ValueError:
        return False


def _creation_key(pod: V1Pod) -> float:
    created = pod.metadata.creation_timestamp
    return created.timestamp() if created is not None else 0.0

