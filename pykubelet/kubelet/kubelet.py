"""The ``Kubelet``: how it is built, how it runs, and what it does with pods.

Seeds 002 and 003 walk this file's upstream counterpart, ``pkg/kubelet/kubelet.go``:

- ``new_main_kubelet`` (upstream ``NewMainKubelet``) constructs every module
  from the configuration and the ``Dependencies`` and wires their channels,
  starting nothing. The order is one-way: the pod syncer first, the pod
  workers around it, then the ``Kubelet`` that holds them all.
- ``Kubelet.run`` (upstream ``Kubelet.Run``) calls ``initialize_modules``,
  starts the long-running loops in upstream's order under the supervisor,
  then runs the sync loop (``sync_loop.py``: ``syncLoop``/``syncLoopIteration``).
- The handlers (``handle_pod_additions``...) are what the sync loop dispatches
  to; they hand pods to their pod worker, which calls back into the pod
  syncer (``pod_sync.py``). ``handle_pod_cleanups`` is housekeeping: it removes
  what no source wants any more.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes_asyncio.client import V1Pod, V1PodStatus

from pykubelet.api import is_terminal_phase, pod_ref, pod_uid
from pykubelet.api.kubetypes import FILE_SOURCE, HTTP_SOURCE, PodUpdate, SyncPodType
from pykubelet.config.server import KubeletServer
from pykubelet.container import ContainerState, Pod, PodStatus, ProbeResult
from pykubelet.container.cache import PodCache
from pykubelet.cri.errors import CRIError
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.getters import plugins_dir, pod_dir, pods_dir
from pykubelet.kubelet.pod_manager import PodManager
from pykubelet.kubelet.pod_sync import KubeletPodSyncer, PodSyncOptions
from pykubelet.kubelet.resources import (
    ResourceManagers,
    build_resource_managers,
    new_container_manager,
    runtime_sandbox_image,
    start_container_manager,
)
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.kubelet.sync_loop import LoopInputs, sync_loop
from pykubelet.kuberuntime import KubeGenericRuntimeManager, RuntimeManagerOptions
from pykubelet.lifecycle.handlers import HandlerRunner
from pykubelet.pleg import GenericPLEG
from pykubelet.podworkers import KillPodOptions, PodWorkers, UpdatePodOptions
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.prober import Prober
from pykubelet.prober.results import ResultsManager, ResultUpdate
from pykubelet.sources.file import StaticPodFileSource
from pykubelet.sources.http import StaticPodURLSource
from pykubelet.sources.podconfig import PodConfig
from pykubelet.status import ReasonCache, StatusManager
from pykubelet.util import klog
from pykubelet.util.supervisor import Supervisor

# Upstream: updateRuntimeUp runs every 5 s; a failed pod sync is retried after 10 s.
RUNTIME_UP_PERIOD = 5.0
POD_WORKER_BACKOFF = 10.0


@dataclass
class KubeletOptions:
    node_name: str
    root_dir: str
    pod_logs_dir: str = "/var/log/pods"
    host_ip: str = ""
    max_pods: int = 110
    sync_frequency: float = 60.0



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


def seconds(value: object) -> float:
    """A configuration duration (``Duration`` or a number) in seconds."""
    total = getattr(value, "total_seconds", None)
    return float(total()) if callable(total) else float(value)  # type: ignore[arg-type]


def make_pod_source_config(server: KubeletServer, node_name: str) -> PodConfig:
    """Upstream ``makePodSourceConfig``: the pod config with a channel per configured source.

    The sources are registered with the pod config, which owns them; they are
    started with it by ``start_kubelet``.
    """
    config = server.config
    pod_config = PodConfig(node_name)
    if config.static_pod_path:
        klog.info("Adding static pod path", path=config.static_pod_path)
        pod_config.add_source(StaticPodFileSource(
            config.static_pod_path, node_name, pod_config.channel(FILE_SOURCE),
            check_frequency=seconds(config.file_check_frequency)))
    if config.static_pod_url:
        klog.info("Adding pod URL with HTTP header", URL=config.static_pod_url,
                  header=sorted(config.static_pod_url_header or {}))
        pod_config.add_source(StaticPodURLSource(
            config.static_pod_url, dict(config.static_pod_url_header or {}), node_name,
            pod_config.channel(HTTP_SOURCE), check_frequency=seconds(config.http_check_frequency)))
    return pod_config


async def new_main_kubelet(server: KubeletServer, deps: Dependencies, pod_config: PodConfig,
                           node_name: str, host_ip: str) -> Kubelet:
    """Upstream ``NewMainKubelet``: construct every module and wire them; start nothing.

    The one call made here is the runtime's version check, as upstream's
    runtime manager makes it on construction: a kubelet whose runtime speaks
    another CRI version must not be built at all.
    """
    config, flags = server.config, server.flags
    supervisor = Supervisor()
    # The container manager comes first: every sandbox is placed in its pod cgroup.
    container_manager = new_container_manager(server)
    pod_cgroups = container_manager if config.cgroups_per_qos else None
    # Probe verdicts: liveness and startup steer the runtime manager (kill and
    # restart), readiness and startup shape the pod status.
    liveness, readiness, startup = ResultsManager(), ResultsManager(), ResultsManager()

    async def pod_ip_for_hooks(pod: V1Pod) -> str:
        # Hooks run inside a sync, when the runtime already knows the sandbox IP
        # (the status manager may not have it yet).
        status = await runtime.get_pod_status(
            pod.metadata.uid, pod.metadata.name, pod.metadata.namespace)
        return status.ips[0] if status.ips else ""

    handler_runner = HandlerRunner(deps.runtime_service, pod_ip_for_hooks, deps.recorder)
    runtime = KubeGenericRuntimeManager(deps.runtime_service, deps.image_service,
                                        RuntimeManagerOptions(
        root_dir=flags.root_dir,
        pod_logs_dir=config.pod_logs_dir,
        cluster_dns=list(config.cluster_dns or []),
        cluster_domain=config.cluster_domain or "",
        resolv_conf=config.resolv_conf,
        node_name=node_name,
        serialize_image_pulls=config.serialize_image_pulls,
        registry_pull_qps=float(config.registry_pull_qps),
        registry_burst=int(config.registry_burst),
        cpu_cfs_quota=config.cpu_cfs_quota,
        pod_cgroup_parent=pod_cgroups.pod_cgroup_parent if pod_cgroups is not None else None,
    ), liveness=liveness, startup=startup, handler_runner=handler_runner, recorder=deps.recorder)
    await runtime.initialize()

    cache = PodCache()
    pleg = GenericPLEG(runtime, cache)
    runtime_state = RuntimeState()
    runtime_state.add_health_check("PLEG", pleg.healthy)
    status_manager = StatusManager()
    reason_cache = ReasonCache()
    probe_manager = ProbeManager(Prober(deps.runtime_service, deps.recorder), liveness=liveness,
                                 readiness=readiness, startup=startup,
                                 status_provider=status_manager.peek_pod_status)
    syncer = KubeletPodSyncer(
        PodSyncOptions(root_dir=flags.root_dir, host_ip=host_ip,
                       runtime_type=runtime.runtime_type),
        runtime, status_manager, reason_cache, runtime_state, probe_manager,
        container_manager=pod_cgroups, recorder=deps.recorder,
        # Bound late: the pod workers are built around the syncer.
        abnormal_termination=lambda uid: pod_workers.abnormal_termination(uid))
    pod_workers = PodWorkers(syncer, cache, resync_interval=seconds(config.sync_frequency),
                             backoff_period=POD_WORKER_BACKOFF)
    pod_manager = PodManager()

    async def evict(pod: V1Pod, grace: int, status_func: Callable[[V1PodStatus], None]) -> None:
        await pod_workers.terminate_pod_abnormally_and_wait(
            pod, grace_period_override=grace, pod_status_func=status_func, evict=True)

    resources = build_resource_managers(
        server, container_manager, deps.runtime_service, deps.image_service, runtime,
        pod_workers, active_pods=lambda: active_pods(pod_manager, pod_workers, status_manager),
        kill_pod=evict, recorder=deps.recorder, node_name=node_name)
    return Kubelet(
        KubeletOptions(node_name=node_name, root_dir=flags.root_dir,
                       pod_logs_dir=config.pod_logs_dir, host_ip=host_ip,
                       max_pods=config.max_pods, sync_frequency=seconds(config.sync_frequency)),
        deps=deps, supervisor=supervisor, runtime=runtime, cache=cache, pleg=pleg,
        pod_manager=pod_manager, status_manager=status_manager, reason_cache=reason_cache,
        runtime_state=runtime_state, probe_manager=probe_manager, pod_workers=pod_workers,
        sources_ready=pod_config.sources_ready,
        sync_loop_monitor=SyncLoopMonitor(
            threshold=max(2 * seconds(config.sync_frequency), 300.0)),
        resources=resources)


def active_pods(pod_manager: PodManager, pod_workers: PodWorkers,
                status_manager: StatusManager) -> list[V1Pod]:
    """Upstream ``GetActivePods``: admitted pods that are not (or not yet) finished."""
    active = []
    for pod in pod_manager.get_pods():
        uid = pod_uid(pod)
        if pod_workers.is_pod_terminated(uid):
            continue
        status = status_manager.peek_pod_status(uid)
        terminal = status is not None and is_terminal_phase(status.phase)
        if terminal and not pod_workers.is_pod_termination_requested(uid):
            continue
        active.append(pod)
    return active


class Kubelet:
    """The node agent: every module, the loops that drive them, and the pod handlers."""

    def __init__(self, options: KubeletOptions, *, deps: Dependencies, supervisor: Supervisor,
                 runtime: KubeGenericRuntimeManager, cache: PodCache, pleg: GenericPLEG,
                 pod_manager: PodManager, status_manager: StatusManager,
                 reason_cache: ReasonCache, runtime_state: RuntimeState,
                 probe_manager: ProbeManager, pod_workers: PodWorkers,
                 sources_ready: Callable[[], bool],
                 sync_loop_monitor: SyncLoopMonitor,
                 resources: ResourceManagers | None = None) -> None:
        self.options = options
        self.deps = deps
        self.supervisor = supervisor
        self.runtime = runtime
        self.cache = cache
        self.pleg = pleg
        self.pod_manager = pod_manager
        self.status_manager = status_manager
        self.reason_cache = reason_cache
        self.runtime_state = runtime_state
        self.probe_manager = probe_manager
        self.pod_workers = pod_workers
        self.sources_ready = sources_ready
        self.sync_loop_monitor = sync_loop_monitor
        # Resource management: cgroups, eviction, garbage collection, log rotation.
        self.resources = resources

    # -- start-up (upstream Kubelet.Run and initializeModules) -------------------

    async def run(self, updates: asyncio.Queue[PodUpdate]) -> None:
        """Upstream ``Kubelet.Run``: initialise, start the loops, then run the sync loop."""
        if self.deps.standalone:
            klog.info("No API server defined - no node status update will be sent")
        await self.initialize_modules()
        spawn = self.supervisor.spawn
        # Upstream's order: runtime health first (pods wait on it), then node
        # status and lease (cluster mode), the status manager, the probe manager
        # (its workers start per pod), PLEG, and last the sync loop itself.
        spawn("runtime-up", self.update_runtime_up_forever)
        if self.resources is not None:
            # Upstream's StartGarbageCollection, the eviction manager and the log manager.
            for name, factory in self.resources.tasks(self.sources_ready,
                                                      self.cached_pod_status):
                spawn(name, factory)
        spawn("pleg", self.pleg.run)
        await sync_loop(self.sync_loop_inputs(updates), self)

    async def initialize_modules(self) -> None:
        """Upstream ``initializeModules``: what must exist before any pod is synced.

        The data directories are created only now, after validation, so that a
        bad configuration never leaves anything behind on the node.
        """
        root = self.options.root_dir
        for directory in (root, pods_dir(root), plugins_dir(root),
                          self.options.pod_logs_dir):
            await asyncio.to_thread(self.deps.os_interface.makedirs, directory, 0o750)
        if self.resources is not None:
            # The node's cgroups must be right before any pod starts: a cgroup v1 host
            # with failCgroupV1, a driver other than the runtime's, reservations beyond
            # capacity or a missing cgroupRoot stop the kubelet here.
            await start_container_manager(self.resources.container_manager,
                                          self.deps.runtime_service)
            # Image GC never removes the runtime's pause image.
            self.resources.image_gc.sandbox_image = await runtime_sandbox_image(
                self.deps.runtime_service)

    def sync_loop_inputs(self, updates: asyncio.Queue[PodUpdate]) -> LoopInputs:
        """The channels of upstream's ``syncLoopIteration`` select, and its callbacks."""
        return LoopInputs(
            config_updates=updates,
            pleg_events=self.pleg.watch(),
            liveness_updates=self.probe_manager.liveness.updates(),
            readiness_updates=self.probe_manager.readiness.updates(),
            startup_updates=self.probe_manager.startup.updates(),
            runtime_errors=self.runtime_state.runtime_errors,
            runtime_starting=self.runtime_state.starting_up,
            pod_by_uid=self.pod_manager.get_pod_by_uid,
            pods_to_sync=self.pods_to_sync,
            sources_ready=self.sources_ready,
            on_probe_update=self.on_probe_update,
            heartbeat=self.sync_loop_monitor.beat,
            on_container_died=self.on_container_died,
        )

    async def update_runtime_up(self) -> None:
        """Upstream ``updateRuntimeUp``: record whether the runtime and its network are ready."""
        try:
            status = await self.runtime.status()
        except CRIError as err:
            klog.error("Container runtime sanity check failed", err)
            return
        state = self.runtime_state
        ready = status.get("RuntimeReady")
        if ready is None or not ready.status:
            reason = (f"{ready.reason}: {ready.message}" if ready
                      else "RuntimeReady condition missing")
            state.set_runtime_error(f"container runtime not ready: {reason}")
            klog.error("Container runtime not ready", reason=reason)
            return
        state.set_runtime_error(None)
        network = status.get("NetworkReady")
        if network is None or not network.status:
            why = (f"{network.reason}: {network.message}" if network
                   else "NetworkReady condition missing")
            state.set_network_error(f"container runtime network not ready: {why}")
        else:
            state.set_network_error(None)
        state.set_runtime_sync()

    async def update_runtime_up_forever(self) -> None:
        while True:
            await self.update_runtime_up()
            await asyncio.sleep(RUNTIME_UP_PERIOD)

    async def stop(self) -> None:
        """Stop the loops and the per-pod workers; containers keep running, as upstream."""
        klog.info("Shutting down kubelet")
        await self.supervisor.shutdown()
        await self.probe_manager.stop()
        await self.pod_workers.stop()

    # -- directories ---------------------------------------------------------

    # -- handlers called by the sync loop ----------------------------------------

    def handle_pod_additions(self, pods: list[V1Pod]) -> None:
        for pod in sorted(pods, key=_creation_key):
            self.pod_manager.add_pod(pod)
            if self.pod_workers.is_pod_termination_requested(pod_uid(pod)):
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
            self.pod_workers.update_pod(UpdatePodOptions(
                update_type=SyncPodType.KILL, pod=pod, start_time=time.monotonic(),
                kill_pod_options=KillPodOptions()))

    def handle_pod_reconcile(self, pods: list[V1Pod]) -> None:
        for pod in pods:
            self.pod_manager.update_pod(pod)

    def handle_pod_syncs(self, pods: list[V1Pod]) -> None:
        for pod in pods:
            self.dispatch_work(pod, SyncPodType.SYNC)

    def dispatch_work(self, pod: V1Pod, update_type: SyncPodType) -> None:
        self.pod_workers.update_pod(UpdatePodOptions(
            update_type=update_type, pod=pod, start_time=time.monotonic()))

    def can_admit_pod(self, pod: V1Pod) -> tuple[str, str] | None:
        """Admission: the node's pod capacity (``maxPods``)."""
        active = [p for p in self.pod_manager.get_pods()
                  if pod_uid(p) != pod_uid(pod) and not self._is_terminal(p)
                  and not self.pod_workers.is_pod_terminated(pod_uid(p))]
        if len(active) >= self.options.max_pods:
            return ("OutOfpods", "Node didn't have enough resource: pods, "
                    f"requested: 1, used: {len(active)}, capacity: {self.options.max_pods}")
        if self.resources is not None:
            return self.resources.eviction.admit(pod)
        return None

    def active_pods(self) -> list[V1Pod]:
        return active_pods(self.pod_manager, self.pod_workers, self.status_manager)

    def on_container_died(self, uid: str, container_id: str) -> None:
        """The sync loop's ContainerDied seam (upstream ``cleanUpContainersInPod``)."""
        if self.resources is not None:
            self.resources.container_gc.container_died(uid, container_id)

    def cached_pod_status(self, uid: str) -> PodStatus | None:
        status, _ = self.cache.get(uid)
        return status

    def reject_pod(self, pod: V1Pod, reason: str, message: str) -> None:
        klog.info("Pod admission denied", pod=pod_ref(pod), reason=reason, message=message)
        self.status_manager.set_pod_status(pod, V1PodStatus(
            phase="Failed", reason=reason, message=f"Pod was rejected: {message}"))

    def _is_terminal(self, pod: V1Pod) -> bool:
        status = self.status_manager.peek_pod_status(pod_uid(pod))
        return status is not None and is_terminal_phase(status.phase)

    def pods_to_sync(self) -> list[V1Pod]:
        pods = []
        for uid in self.pod_workers.work_queue.get_work():
            pod = self.pod_manager.get_pod_by_uid(uid)
            if pod is not None:
                pods.append(pod)
        return pods

    def on_probe_update(self, probe_type: str, update: ResultUpdate) -> None:
        """Readiness shows in the cached status at once; the pod sync that follows redoes it."""
        if probe_type == "readiness":
            self.status_manager.set_container_readiness(
                update.pod_uid, str(update.container_id), update.result == ProbeResult.SUCCESS)

    # -- housekeeping -------------------------------------------------------

    async def handle_pod_cleanups(self) -> None:
        """Upstream ``HandlePodCleanups``: make the node match the sources' wishes."""
        workers = self.pod_workers
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
        await self._remove_orphaned_pod_cgroups(set(desired), set(worker_states))

    async def _remove_orphaned_pod_cgroups(self, desired: set[str], known: set[str]) -> None:
        """Upstream ``cleanupOrphanedPodCgroups``: once nothing of a pod can run any more."""
        if self.resources is None or not self.resources.container_manager.config.cgroups_per_qos:
            return
        manager = self.resources.container_manager
        workers = self.pod_workers
        keep = {uid for uid in desired if not workers.is_pod_terminated(uid)}
        keep |= {uid for uid in known if workers.could_have_running_containers(uid)}
        if await asyncio.to_thread(manager.remove_orphaned_pod_cgroups, keep):
            await manager.update_qos_cgroups()

    def _remove_orphaned_pod_dirs(self, desired: set[str]) -> None:
        try:
            entries = os.listdir(pods_dir(self.options.root_dir))
        except FileNotFoundError:
            return
        workers = self.pod_workers
        for uid in entries:
            if uid in desired or not workers.should_pod_content_be_removed(uid):
                continue
            klog.v(2).info("Removing directory of a deleted pod", podUID=uid)
            shutil.rmtree(pod_dir(self.options.root_dir, uid), ignore_errors=True)

    # -- views ----------------------------------------------------------

    def get_pods(self) -> list[V1Pod]:
        """Desired pods with their latest API status (the read-only ``/pods``)."""
        return [self.status_manager.pod_with_status(pod) for pod in self.pod_manager.get_pods()]


def _still_running(pod: Pod) -> bool:
    """A runtime pod with a running container or a ready sandbox still needs a kill."""
    return any(c.state == ContainerState.RUNNING for c in (*pod.containers, *pod.sandboxes))


def _creation_key(pod: V1Pod) -> float:
    created = pod.metadata.creation_timestamp
    return created.timestamp() if created is not None else 0.0

