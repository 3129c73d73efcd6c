"""The three per-pod phase functions the pod workers call (upstream ``SyncPod`` and friends).

Upstream's ``Kubelet`` is both the sync loop's handler and the pod workers'
syncer, which in Go is wired by assigning ``klet.podWorkers`` after the fact.
Here the syncer is its own object, built before the pod workers and handed to
them, and the ``Kubelet`` is built after both: construction goes one way.

- ``sync_pod`` computes the API status, then drives the runtime towards the
  spec (sandbox, init, sidecar and app containers, restarts);
- ``sync_terminating_pod`` stops every container within the grace period and
  records the final status;
- ``sync_terminated_pod`` releases what the pod held (probe workers) once no
  container can run any more.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes_asyncio.client import V1Pod, V1PodStatus

from pykubelet.api import is_terminal_phase, pod_ref, pod_uid
from pykubelet.api.kubetypes import SyncPodType
from pykubelet.cm import ContainerManager
from pykubelet.cm.cgroups import CgroupError
from pykubelet.container import ContainerID, ContainerState, Pod, PodStatus, ProbeResult, Runtime
from pykubelet.container.helpers import running_pod_from_status
from pykubelet.events import WARNING, EventRecorder
from pykubelet.kubelet.getters import POD_SUBDIRECTORIES, pod_dir
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.podworkers import KillPodOptions
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.results import ResultsManager
from pykubelet.status import ReasonCache, StatusManager, generate_api_pod_status
from pykubelet.util import klog

FAILED_TO_CREATE_POD_CONTAINER = "FailedToCreatePodContainer"


@dataclass
class PodSyncOptions:
    """The node facts a pod sync needs."""

    root_dir: str
    host_ip: str = ""
    runtime_type: str = "containerd"


class KubeletPodSyncer:
    """Implements ``pykubelet.podworkers.PodSyncer`` over the runtime and the status manager."""

    def __init__(self, options: PodSyncOptions, runtime: Runtime,
                 status_manager: StatusManager, reason_cache: ReasonCache,
                 runtime_state: RuntimeState, probe_manager: ProbeManager, *,
                 container_manager: ContainerManager | None = None,
                 recorder: EventRecorder | None = None,
                 abnormal_termination: Callable[[str], KillPodOptions | None] = lambda uid: None,
                 ) -> None:
        """``container_manager`` gives pods their cgroups (None: ``cgroupsPerQOS`` off);
        ``abnormal_termination`` is the pod workers' record of a kill that brings its own
        status (an eviction), applied to every status computed afterwards."""
        self.options = options
        self.runtime = runtime
        self.status_manager = status_manager
        self.reason_cache = reason_cache
        self.runtime_state = runtime_state
        self.probe_manager = probe_manager
        self.container_manager = container_manager
        self.recorder = recorder
        self.abnormal_termination = abnormal_termination

    def make_pod_data_dirs(self, pod: V1Pod) -> None:
        base = pod_dir(self.options.root_dir, pod_uid(pod))
        for sub in ("", *POD_SUBDIRECTORIES):
            os.makedirs(os.path.join(base, sub), mode=0o750, exist_ok=True)

    def _api_status(self, pod: V1Pod, status: PodStatus, terminal: bool = False) -> V1PodStatus:
        previous = self.status_manager.get_pod_status(pod_uid(pod))
        api_status = generate_api_pod_status(
            pod, status, self.reason_cache, host_ip=self.options.host_ip,
            pod_is_terminal=terminal, previous=previous,
            readiness=lambda container_id: _succeeded(self.probe_manager.readiness, container_id),
            startup=lambda container_id: _succeeded(self.probe_manager.startup, container_id))
        abnormal = self.abnormal_termination(pod_uid(pod))
        if abnormal is not None and abnormal.pod_status_func is not None:
            abnormal.pod_status_func(api_status)
        return api_status

    async def sync_pod(self, update_type: SyncPodType, pod: V1Pod, mirror_pod: V1Pod | None,
                       pod_status: PodStatus) -> bool:
        """Returns True once the pod reached a terminal phase (the worker then terminates it)."""
        api_status = self._api_status(pod, pod_status)
        self.status_manager.set_pod_status(pod, api_status)
        stored = self.status_manager.get_pod_status(pod_uid(pod)) or api_status
        if is_terminal_phase(stored.phase):
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
        """The pod's cgroup (and the QoS cgroups it changes) before its sandbox exists.

        A failure fails this pod's sync (retried with back-off) and says why in
        its status and an event; the kubelet and other pods carry on.
        """
        assert self.container_manager is not None
        try:
            await self.container_manager.ensure_pod(pod)
        except CgroupError as err:
            message = f"unable to ensure pod container exists: {err}"
            if self.recorder is not None:
                self.recorder.event(pod, WARNING, FAILED_TO_CREATE_POD_CONTAINER, message)
            self.status_manager.set_pod_status(pod, _with_reason(
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


def _with_reason(status: V1PodStatus | None, reason: str, message: str) -> V1PodStatus:
    """A pod that cannot start says why in its status; its phase stays what it was."""
    updated = copy.copy(status) if status is not None else V1PodStatus(phase="Pending")
    updated.reason = reason
    updated.message = message
    return updated


def _succeeded(results: ResultsManager, container_id: str) -> bool:
    try:
        return results.get(ContainerID.parse(container_id)) == ProbeResult.SUCCESS
    except ValueError:
        return False


__all__ = ["KubeletPodSyncer", "PodSyncOptions"]
