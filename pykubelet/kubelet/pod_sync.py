"""The three per-pod phase functions the pod workers call (upstream ``SyncPod`` and friends).

Upstream's ``Kubelet`` is both the sync loop's handler and the pod workers'
syncer, which in Go is wired by assigning ``klet.podWorkers`` after the fact.
Here the syncer is its own object, built before the pod workers and handed to
them, and the ``Kubelet`` is built after both: construction goes one way.

- ``sync_pod`` computes the API status, keeps a static pod's mirror pod in
  the API server current, waits for the pod's volumes, then drives the
  runtime towards the spec (sandbox, init, sidecar and app containers,
  restarts);
- ``sync_terminating_pod`` stops every container within the grace period and
  records the final status;
- ``sync_terminated_pod`` releases what the pod held (probe workers) once no
  container can run any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes_asyncio.client import V1Node, V1Pod, V1PodStatus

from pykubelet.api import is_terminal_phase, pod_ref, pod_uid
from pykubelet.api.kubetypes import (
    CONFIG_FIRST_SEEN_ANNOTATION_KEY,
    SyncPodType,
    is_static_pod,
    pod_full_name,
)
from pykubelet.cm import ContainerManager
from pykubelet.cm.cgroups import CgroupError
from pykubelet.container import ContainerID, ContainerState, Pod, PodStatus, ProbeResult, Runtime
from pykubelet.container.helpers import running_pod_from_status
from pykubelet.events import WARNING, EventRecorder
from pykubelet.kubelet.getters import POD_SUBDIRECTORIES, pod_dir
from pykubelet.kubelet.mirror_client import MirrorClient
from pykubelet.kubelet.node_info import host_ips_any_way
from pykubelet.kubelet.pod_manager import PodManager, is_mirror_pod_of
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.lifecycle.interfaces import PodSyncHandler
from pykubelet.metrics.podstartup import POD_STARTUP_TRACKER
from pykubelet.objectcache import Manager
from pykubelet.podworkers import KillPodOptions
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.results import ResultsManager
from pykubelet.status import ReasonCache, StatusManager, generate_api_pod_status
from pykubelet.util import klog
from pykubelet.volumemanager import VolumeManager

FAILED_TO_CREATE_POD_CONTAINER = "FailedToCreatePodContainer"
FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET = "FailedToRetrieveImagePullSecret"


@dataclass
class PodSyncOptions:
    """The node facts a pod sync needs."""

    root_dir: str
    host_ip: str = ""
    runtime_type: str = "containerd"
    node_name: str = ""


class PodEnvObjects(Protocol):
    """The ConfigMaps and Secrets a pod's env names, held from its sync to its end."""

    async def prefetch_env(self, pod: V1Pod) -> None: ...

    def forget_pod_env(self, uid: str) -> None: ...


class KubeletPodSyncer:
    """Implements ``pykubelet.podworkers.PodSyncer`` over the runtime and the status manager."""

    def __init__(self, options: PodSyncOptions, runtime: Runtime,
                 status_manager: StatusManager, reason_cache: ReasonCache,
                 runtime_state: RuntimeState, probe_manager: ProbeManager, *,
                 is_pod_termination_requested: Callable[[str], bool],
                 abnormal_termination: Callable[[str], KillPodOptions | None],
                 pod_manager: PodManager | None = None,
                 volume_manager: VolumeManager | None = None,
                 mirror_client: MirrorClient | None = None,
                 get_node: Callable[[], V1Node | None] = lambda: None,
                 container_manager: ContainerManager | None = None,
                 recorder: EventRecorder | None = None,
                 env_objects: PodEnvObjects | None = None,
                 pod_sync_handlers: Sequence[PodSyncHandler] = (),
                 secrets: Manager | None = None,
                 ) -> None:
        """``is_pod_termination_requested`` and ``abnormal_termination`` are the pod
        workers' answers (the workers are built around this syncer, so production passes
        them bound late; no default, since a wrong answer would go unnoticed);
        ``container_manager`` gives pods their cgroups (None: ``cgroupsPerQOS`` off);
        ``abnormal_termination`` is the pod workers' record of a kill that brings its own
        status (an eviction), applied to every status computed afterwards;
        ``env_objects`` reads the ConfigMaps and Secrets the pod's env names
        before its containers are created, and drops them once it has terminated;
        ``pod_sync_handlers`` (upstream ``PodSyncHandlers``: the active deadline) may
        have a pod failed by every status computed for it; ``secrets`` reads the pod's
        image pull secrets (None: standalone, no API server, so pulls go without
        credentials)."""
        self.options = options
        self.runtime = runtime
        self.status_manager = status_manager
        self.reason_cache = reason_cache
        self.runtime_state = runtime_state
        self.probe_manager = probe_manager
        self.pod_manager = pod_manager
        self.volume_manager = volume_manager
        self.mirror_client = mirror_client
        self.get_node = get_node
        self.is_pod_termination_requested = is_pod_termination_requested
        self.container_manager = container_manager
        self.recorder = recorder
        self.abnormal_termination = abnormal_termination
        self.env_objects = env_objects
        self.pod_sync_handlers = list(pod_sync_handlers)
        self.secrets = secrets

    async def make_pod_data_dirs(self, pod: V1Pod) -> None:
        """The pod's directory and its subdirectories, made in a worker thread when any is
        missing: while the runtime writes hard (many pods starting) a mkdir can wait
        milliseconds on the file system, and the loop serves every other pod meanwhile."""
        base = pod_dir(self.options.root_dir, pod_uid(pod))
        wanted = [os.path.join(base, sub) for sub in ("", *POD_SUBDIRECTORIES)]
        # Every later sync finds them: a few stat calls are cheaper than a hop to a thread.
        if not all(os.path.isdir(path) for path in wanted):
            await asyncio.to_thread(_make_directories, wanted)

    def host_ips(self) -> list[str]:
        """The node's IPs for pod statuses' ``hostIP``/``hostIPs``; the runtime manager
        reads the same rule (``host_ips_any_way``) for the ``status.hostIP`` env."""
        return host_ips_any_way(self.get_node(), self.options.host_ip)

    def _api_status(self, pod: V1Pod, status: PodStatus, terminal: bool = False) -> V1PodStatus:
        previous = self.status_manager.get_pod_status(pod_uid(pod))
        host_ips = self.host_ips()
        api_status = generate_api_pod_status(
            pod, status, self.reason_cache, host_ip=host_ips[0] if host_ips else "",
            host_ips=host_ips,
            pod_is_terminal=terminal, previous=previous, evicted=self._evicted(pod),
            readiness=lambda container_id: _succeeded(self.probe_manager.readiness, container_id),
            startup=lambda container_id: _succeeded(self.probe_manager.startup, container_id))
        abnormal = self.abnormal_termination(pod_uid(pod))
        if abnormal is not None and abnormal.pod_status_func is not None:
            abnormal.pod_status_func(api_status)
        return api_status

    def _evicted(self, pod: V1Pod) -> tuple[str, str] | None:
        """The (reason, message) of the first handler that wants ``pod`` failed, if any."""
        for handler in self.pod_sync_handlers:
            verdict = handler.should_evict(pod)
            if verdict.evict:
                return verdict.reason, verdict.message
        return None

    async def sync_pod(self, update_type: SyncPodType, pod: V1Pod, mirror_pod: V1Pod | None,
                       pod_status: PodStatus) -> bool:
        """Returns True once the pod reached a terminal phase (the worker then terminates it)."""
        existing = self.status_manager.get_pod_status(pod_uid(pod))
        api_status = self._api_status(pod, pod_status)
        if api_status.phase == "Running" and (existing is None or existing.phase == "Pending"):
            _record_pod_started(pod)
        self.status_manager.set_pod_status(pod, api_status)
        stored = self.status_manager.get_pod_status(pod_uid(pod)) or api_status
        if is_terminal_phase(stored.phase):
            klog.v(4).info("Pod is terminal, skipping sync", pod=pod_ref(pod), phase=stored.phase)
            return True
        network = self.runtime_state.network_errors()
        if network and not (pod.spec.host_network or False):
            raise RuntimeError(f"network is not ready: {'; '.join(network)}")
        if is_static_pod(pod):
            await self.ensure_mirror_pod(pod)
        if self.container_manager is not None:
            await self._ensure_pod_cgroup(pod)
        await self.make_pod_data_dirs(pod)
        # A pod being torn down does not wait for volumes it will never use.
        if self.volume_manager is not None and \
                not self.is_pod_termination_requested(pod_uid(pod)):
            await self.volume_manager.wait_for_attach_and_mount(pod)
        if self.env_objects is not None:
            await self.env_objects.prefetch_env(pod)
        self.probe_manager.add_pod(pod)  # idempotent: probing starts with the first sync
        pull_secrets = await self.pull_secrets_for_pod(pod)
        result = await self.runtime.sync_pod(pod, pod_status, pull_secrets)
        self.reason_cache.update(pod_uid(pod), result)
        error = result.error()
        if error is not None:
            raise error
        return False

    async def pull_secrets_for_pod(self, pod: V1Pod) -> list[dict[str, Any]]:
        """The pod's ``imagePullSecrets`` as read now (upstream ``getPullSecretsForPod``):
        read on every sync, so a secret created after the pod is used by the next pull.
        One that cannot be read is left out, with a warning event naming it."""
        if self.secrets is None:
            return []
        namespace = pod.metadata.namespace or ""
        found: list[dict[str, Any]] = []
        failed: list[str] = []
        for ref in pod.spec.image_pull_secrets or []:
            if not ref.name:
                continue  # the API once let empty names through; they name nothing
            try:
                found.append(await self.secrets.get_object(namespace, ref.name))
            except Exception as err:
                klog.info("Unable to retrieve pull secret, the image pull may not succeed.",
                          pod=pod_ref(pod), secret=f"{namespace}/{ref.name}", err=str(err))
                failed.append(ref.name)
        if failed and self.recorder is not None:
            self.recorder.event(pod, WARNING, FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
                                f"Unable to retrieve some image pull secrets "
                                f"({', '.join(failed)}); attempting to pull the image may "
                                f"not succeed.")
        return found

    async def ensure_mirror_pod(self, pod: V1Pod) -> None:
        """A static pod's mirror pod exists and mirrors this version of it (upstream SyncPod).

        The current mirror pod comes from the pod manager (the watch's latest),
        not from the update that started this sync, which may predate a deletion.
        """
        if self.mirror_client is None or self.pod_manager is None:
            return
        mirror_pod = self.pod_manager.get_mirror_pod_by_pod(pod)
        deleted = False
        if mirror_pod is not None and (mirror_pod.metadata.deletion_timestamp is not None
                                       or not is_mirror_pod_of(mirror_pod, pod)):
            # Outdated or being deleted: replace it.
            klog.info("Trying to delete pod", pod=pod_ref(pod), podUID=pod_uid(mirror_pod))
            deleted = await self.mirror_client.delete_mirror_pod(pod_full_name(pod),
                                                                 pod_uid(mirror_pod))
            if deleted:
                klog.info("Deleted mirror pod because it is outdated", pod=pod_ref(mirror_pod))
                self.pod_manager.remove_pod(mirror_pod)
        if mirror_pod is not None and not deleted:
            return
        node = self.get_node()
        if node is None:
            klog.v(4).info("No need to create a mirror pod, since failed to get node info "
                           "from the cluster", node=self.options.node_name)
            return
        if node.metadata is not None and node.metadata.deletion_timestamp is not None:
            klog.v(4).info("No need to create a mirror pod, since node has been removed "
                           "from the cluster", node=self.options.node_name)
            return
        klog.v(4).info("Creating a mirror pod for static pod", pod=pod_ref(pod))
        try:
            await self.mirror_client.create_mirror_pod(pod)
        except Exception as err:
            klog.error("Failed creating a mirror pod for", err, pod=pod_ref(pod))

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
        POD_STARTUP_TRACKER.delete(pod_uid(pod))
        if self.env_objects is not None:
            self.env_objects.forget_pod_env(pod_uid(pod))
        self.status_manager.set_pod_status(pod, self._api_status(pod, pod_status, terminal=True))
        self.status_manager.terminate_pod(pod)


def _record_pod_started(pod: V1Pod) -> None:
    """Pod start latency metrics, on the pod's first Running status."""
    meta = pod.metadata
    seen_text = ((meta.annotations or {}) if meta else {}).get(CONFIG_FIRST_SEEN_ANNOTATION_KEY)
    first_seen = None
    if seen_text:
        with contextlib.suppress(ValueError):
            # Nanoseconds do not fit a datetime: cut the fraction to microseconds.
            head, dot, rest = seen_text.rstrip("Z").partition(".")
            first_seen = datetime.fromisoformat(
                f"{head}.{rest[:6].ljust(6, '0')}" if dot else head).replace(tzinfo=UTC)
    POD_STARTUP_TRACKER.record_running(pod_uid(pod), first_seen,
                                       meta.creation_timestamp if meta else None,
                                       bool(pod.spec and pod.spec.host_network))


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


def _make_directories(paths: list[str]) -> None:
    for path in paths:
        os.makedirs(path, mode=0o750, exist_ok=True)


__all__ = ["KubeletPodSyncer", "PodSyncOptions"]
