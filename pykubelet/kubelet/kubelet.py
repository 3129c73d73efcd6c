"""The ``Kubelet``: how it is built, how it runs, and what it does with pods.

Seeds 002 and 003 walk this file's upstream counterpart, ``pkg/kubelet/kubelet.go``:

- ``new_main_kubelet`` (upstream ``NewMainKubelet``) constructs every module
  from the configuration and the ``Dependencies`` and wires their channels,
  starting nothing. It is a sequence of phases, each returning complete
  modules: the machine (its topology read once, for the CPU, device and
  topology managers), the cluster parts (``None`` standalone: the mode is
  decided there, once), the runtime, the pods (the pod syncer first, the pod
  workers around it), the resource managers, then the ``Kubelet``, which is
  handed those parts whole.
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
import dataclasses
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import V1Node, V1Pod, V1PodStatus

from pykubelet import metrics
from pykubelet.api import init_then_app_containers, is_terminal_phase, pod_ref, pod_uid
from pykubelet.api.kubetypes import (
    API_SOURCE,
    FILE_SOURCE,
    HTTP_SOURCE,
    PodUpdate,
    SyncPodType,
    build_pod_full_name,
)
from pykubelet.client.informer import ObjectInformer
from pykubelet.cm import ContainerManager
from pykubelet.cm.cpumanager import CPUManager, new_cpu_manager
from pykubelet.cm.cpumanager.topology import CPUTopology, TopologyError
from pykubelet.cm.cpumanager.topology import discover as discover_cpu_topology
from pykubelet.cm.devicemanager import DeviceManager, cri_running_containers
from pykubelet.cm.helpers import MILLI_CPU_PER_CPU
from pykubelet.cm.topologymanager import AffinityStore, TopologyManager, new_topology_manager
from pykubelet.config.server import KubeletServer
from pykubelet.config.units import seconds
from pykubelet.container import ContainerState, Pod, PodStatus, ProbeResult
from pykubelet.container.cache import PodCache
from pykubelet.cri.errors import CRIError
from pykubelet.envvars import service_env_for
from pykubelet.events import WARNING
from pykubelet.kubelet.active_deadline import ActiveDeadlineHandler
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.getters import RootDirs, plugins_dir, pod_dir, pods_dir
from pykubelet.kubelet.network_linux import IPTablesUtilChains
from pykubelet.kubelet.node_info import LocalNode, NodeView, host_ips_any_way
from pykubelet.kubelet.node_status import (
    ClusterParts,
    LatePressure,
    build_cluster_parts,
    read_node_resources,
)
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
from pykubelet.kubelet.server_host import KubeletServerHost
from pykubelet.kubelet.sync_loop import LoopInputs, get_pods_to_sync, sync_loop
from pykubelet.kubelet.volume_host import VolumeHost
from pykubelet.kuberuntime import KubeGenericRuntimeManager, RuntimeManagerOptions
from pykubelet.lifecycle.admission import (
    PodAdmitAttributes,
    PodAdmitHandler,
    PredicateAdmitHandler,
    SysctlAllowlist,
)
from pykubelet.lifecycle.handlers import HandlerRunner
from pykubelet.lifecycle.interfaces import PodSyncLoopHandler
from pykubelet.nodestatus import MachineResources, PressureReporter
from pykubelet.nodestatus.machine import MachineInfo
from pykubelet.nodestatus.resources import (
    CPU,
    MEMORY,
    allocatable_from,
    allocatable_status,
    pods_capacity,
)
from pykubelet.pleg import GenericPLEG
from pykubelet.pluginmanager import DEVICE_PLUGIN, PluginManager, registration_dir
from pykubelet.podresources import (
    PodResourcesServer,
    Providers,
    pod_resources_socket,
    serve_pod_resources,
)
from pykubelet.podworkers import KillPodOptions, PodWorkers, UpdatePodOptions
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.prober import Prober
from pykubelet.prober.results import ResultsManager, ResultUpdate
from pykubelet.sources.apiserver import ApiserverPodSource
from pykubelet.sources.file import StaticPodFileSource
from pykubelet.sources.http import StaticPodURLSource
from pykubelet.sources.podconfig import PodConfig
from pykubelet.stats import StatsProvider
from pykubelet.status import ReasonCache, StatusManager
from pykubelet.util import klog
from pykubelet.util.late import LateBound
from pykubelet.util.supervisor import Supervisor
from pykubelet.volumemanager import VolumeManager

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


def make_pod_source_config(server: KubeletServer, node_name: str, deps: Dependencies,
                           node_has_synced: Callable[[], bool] | None = None) -> PodConfig:
    """Upstream ``makePodSourceConfig``: the pod config with a channel per configured source.

    The sources are registered with the pod config, which owns them; they are
    started with it by ``start_kubelet``. With an API client, the pods bound
    to this node in the API server are a source too (``api``).
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
    if not deps.standalone:
        klog.info("Adding apiserver pod source")
        pod_config.add_source(ApiserverPodSource.for_node(
            deps.kube_client, node_name, pod_config.channel(API_SOURCE),
            node_has_synced=node_has_synced))
    return pod_config


@dataclass(frozen=True)
class LateModules:
    """What modules built early read from modules built later (``pykubelet.util.late``)."""

    pod_workers: LateBound[PodWorkers] = field(
        default_factory=lambda: LateBound("the pod workers"))
    runtime: LateBound[KubeGenericRuntimeManager] = field(
        default_factory=lambda: LateBound("the runtime manager"))
    active_pods: LateBound[Callable[[], list[V1Pod]]] = field(
        default_factory=lambda: LateBound("the active pods"))
    pressure: LateBound[PressureReporter] = field(
        default_factory=lambda: LateBound("the eviction manager"))
    pleg: LateBound[GenericPLEG] = field(default_factory=lambda: LateBound("the PLEG"))
    pod_cache: LateBound[PodCache] = field(default_factory=lambda: LateBound("the pod cache"))


@dataclass(frozen=True)
class MachineParts:
    """The machine before any pod: its cgroups, what it has, and the Node as known here.

    The CPU, device and topology managers live here, not with the ``ResourceManagers``:
    they are built from the machine's topology (read once, ``topology``), and modules
    built before the pods need them whole: the Node's allocatable and the cluster parts'
    device capacity read the device manager, every container's options read the CPU
    manager's cpusets and the device manager's run options. The ``ResourceManagers``
    (garbage collection, eviction, log rotation) need the runtime manager and the pod
    workers, so they come last; grouping the three with them would mean building a
    module in halves or assigning into it after it is built.
    """

    container_manager: ContainerManager
    machine: MachineInfo
    resources: MachineResources
    node_view: NodeView
    # The CPUs with their core, socket and NUMA node: what all three managers below see.
    topology: CPUTopology
    # Exclusive CPUs (cpuManagerPolicy): each container's cpuset, its loop.
    cpu_manager: CPUManager
    # The resource-allocation admit handler (topologyManagerPolicy): NUMA hints from its
    # providers (the device and CPU managers), merged, then each provider allocates.
    topology_manager: TopologyManager
    # Device plugins: kubelet.sock, their resources on the node, allocation at admission,
    # each container's device options.
    device_manager: DeviceManager


@dataclass(frozen=True)
class RuntimeParts:
    """The runtime manager and what it is built on: volumes and the containers' options."""

    manager: KubeGenericRuntimeManager
    volume_host: VolumeHost
    volume_manager: VolumeManager
    sandbox_image: str


@dataclass(frozen=True)
class PodParts:
    """The modules that hold and sync pods, the pod workers around the syncer."""

    pod_manager: PodManager
    cache: PodCache
    pleg: GenericPLEG
    status_manager: StatusManager
    probe_manager: ProbeManager
    active_deadline: ActiveDeadlineHandler
    pod_workers: PodWorkers
    # Pods that hold node resources: what eviction and the container manager weigh.
    active_pods: Callable[[], list[V1Pod]]


@dataclass(frozen=True)
class PodResourcesPods:
    """The pods the pod-resources API reports: ``List`` the active ones, ``Get`` any known."""

    active: Callable[[], list[V1Pod]]
    pod_manager: PodManager

    def active_pods(self) -> list[V1Pod]:
        return self.active()

    def pod_by_name(self, namespace: str, name: str) -> V1Pod | None:
        return self.pod_manager.get_pod_by_full_name(build_pod_full_name(name, namespace))


async def new_main_kubelet(server: KubeletServer, deps: Dependencies, pod_config: PodConfig,
                           node_name: str, host_ip: str, *,
                           node_informer: ObjectInformer[V1Node] | None) -> Kubelet:
    """Upstream ``NewMainKubelet``: construct every module and wire them; start nothing.

    Each phase returns complete modules; a module built early that asks one built
    later reads it through ``LateModules``. The mode is decided once, here:
    ``cluster`` is the ``ClusterParts`` with an API server, ``None`` standalone.
    The machine is read (under ``deps.host_root``): what it has, and its CPU topology
    once, for the CPU, device and topology managers; one it cannot read stops the
    kubelet (``MachineInfoError``). The one call made is the runtime's version check,
    as upstream's runtime manager makes it on construction: a kubelet whose runtime
    speaks another CRI version must not be built at all.
    """
    config, flags = server.config, server.flags
    metrics.set_node_name(node_name)
    late = LateModules()
    machine = await build_machine_parts(server, deps, pod_config, node_name, node_informer,
                                        late)
    # The node's readiness reads the PLEG's health (built with the pods, below).
    runtime_state = RuntimeState(health_checks=[("PLEG", lambda: late.pleg.get().healthy())])
    cluster = None if deps.standalone else await build_cluster_parts(
        server, deps, node_name, informer=node_informer, node_view=machine.node_view,
        health=runtime_state, machine=machine.machine, resources=machine.resources,
        pressure=LatePressure(late.pressure),
        device_capacity=machine.device_manager.get_capacity)
    # Probe verdicts: liveness and startup steer the runtime manager (kill and
    # restart), readiness and startup shape the pod status.
    liveness, readiness, startup = ResultsManager(), ResultsManager(), ResultsManager()
    runtime = await build_runtime_parts(server, deps, pod_config, machine, cluster, late,
                                        node_name=node_name, host_ip=host_ip,
                                        liveness=liveness, startup=startup)
    pods = build_pod_parts(server, deps, runtime, machine, cluster, late,
                           runtime_state=runtime_state, node_name=node_name, host_ip=host_ip,
                           probe_results=(liveness, readiness, startup))
    resources = build_resource_managers(
        server, machine.container_manager, deps.runtime_service, deps.image_service,
        runtime.manager, pods.pod_workers, active_pods=pods.active_pods,
        kill_pod=evict_with(pods.pod_workers), recorder=deps.recorder, node_name=node_name,
        sandbox_image=runtime.sandbox_image)
    # The node status reports the eviction manager's pressure as the node's conditions.
    late.pressure.set(resources.eviction)
    return Kubelet(
        KubeletOptions(node_name=node_name, root_dir=flags.root_dir,
                       pod_logs_dir=config.pod_logs_dir, host_ip=host_ip,
                       max_pods=config.max_pods, sync_frequency=seconds(config.sync_frequency)),
        deps=deps, machine=machine, runtime=runtime, pods=pods, resources=resources,
        cluster=cluster, runtime_state=runtime_state, sources_ready=pod_config.sources_ready,
        admit_handlers=admit_handlers(server, machine),
        pod_resources=PodResourcesServer(
            Providers(pods=PodResourcesPods(pods.active_pods, pods.pod_manager),
                      devices=machine.device_manager, cpus=machine.cpu_manager),
            get_enabled=server.feature_gates().enabled("KubeletPodResourcesGet")),
        # makeIPTablesUtilChains: the hint, canary and localnet firewall chains.
        iptables_util_chains=IPTablesUtilChains() if config.make_iptables_util_chains else None)


def admit_handlers(server: KubeletServer, machine: MachineParts) -> list[PodAdmitHandler]:
    """What admission asks after the eviction manager (``Kubelet.can_admit_pod``), in
    upstream's order: the sysctls, then the topology manager, which allocates before the
    predicates as upstream's resource allocation handler does, then the predicates."""
    return [SysctlAllowlist.for_node(server.config.allowed_unsafe_sysctls or []),
            machine.topology_manager,
            # Allocatable raised to what pods already hold (a plugin away).
            PredicateAdmitHandler(
                lambda: machine.device_manager.sanitize_node_allocatable(
                    machine.node_view.get_node_any_way()))]


class MachineInfoError(Exception):
    """The machine's facts cannot be read: no kubelet is built (upstream's
    ``NewMainKubelet`` fails when the machine info cannot be had)."""


async def build_machine_parts(server: KubeletServer, deps: Dependencies, pod_config: PodConfig,
                              node_name: str, node_informer: ObjectInformer[V1Node] | None,
                              late: LateModules) -> MachineParts:
    """The container manager first (every sandbox is placed in its pod cgroup), then what
    the node has and pods may use: the machine, less the container manager's reservation.
    The node status reports it; admission reads it before the Node exists.

    The CPU topology is read once, here, and handed to the CPU, device and topology
    managers, so that all three place containers on the same NUMA nodes.
    """
    config, flags = server.config, server.flags
    container_manager = new_container_manager(
        server, active_pods=lambda: late.active_pods.get()())
    machine, node_resources = await read_node_resources(
        server, container_manager.allocatable_reservation, host_root=deps.host_root)
    try:
        topology = await asyncio.to_thread(discover_cpu_topology, deps.host_root)
    except TopologyError as err:
        raise MachineInfoError(
            f"reading the machine's CPU topology under {deps.host_root}: {err}") from err
    numa_nodes = topology.numa_nodes()
    klog.info("Machine topology read", cpus=len(topology.cpus), numaNodes=numa_nodes)
    pods_limit = pods_capacity(config.max_pods, config.pods_per_core, machine.num_cores)
    # The NUMA affinity the topology manager chooses per container, read by its providers
    # as they allocate.
    affinity = AffinityStore()
    # Its checkpoint is read at start (initialize_modules), its socket served by its task.
    device_manager = DeviceManager(
        active_pods=lambda: late.active_pods.get()(), sources_ready=pod_config.sources_ready,
        running_containers=cri_running_containers(deps.runtime_service),
        affinity=affinity.get_affinity, numa_nodes=numa_nodes)
    node_view = NodeView(LocalNode(
        node_name, hostname=flags.hostname_override or None, node_labels=flags.node_labels,
        taints=config.register_with_taints,
        allocatable=lambda: {**allocatable_status(node_resources, pods_limit),
                             **{name: str(count) for name, count
                                in device_manager.allocatable().items()}}),
        node_informer)
    # Its state is read at start (initialize_modules), once the root directory exists.
    cpu_manager = new_cpu_manager(
        policy_name=config.cpu_manager_policy, root_dir=flags.root_dir,
        reserved_system_cpus=config.reserved_system_cpus,
        kube_reserved=dict(config.kube_reserved or {}),
        system_reserved=dict(config.system_reserved or {}),
        reconcile_period=seconds(config.cpu_manager_reconcile_period),
        runtime_service=deps.runtime_service, active_pods=lambda: late.active_pods.get()(),
        pod_status=lambda uid: late.pod_cache.get().get(uid)[0],
        sources_ready=pod_config.sources_ready, affinity=affinity, topology=topology)
    # memoryManagerPolicy None is upstream's none memory manager: no hints (a "don't
    # care" to every merge) and nothing allocated, so it adds no provider. Static is
    # accepted but not implemented; the start-up notice lists it.
    klog.info("Memory manager gives no topology hints", policy=config.memory_manager_policy)
    topology_manager = new_topology_manager(
        policy_name=config.topology_manager_policy, scope_name=config.topology_manager_scope,
        numa_nodes=numa_nodes,
        # Upstream's order: devices first, then CPUs (each allocates in this order).
        hint_providers=[device_manager, cpu_manager], store=affinity)
    return MachineParts(container_manager, machine, node_resources, node_view, topology,
                        cpu_manager, topology_manager, device_manager)


async def build_runtime_parts(server: KubeletServer, deps: Dependencies, pod_config: PodConfig,
                              machine: MachineParts, cluster: ClusterParts | None,
                              late: LateModules, *, node_name: str, host_ip: str,
                              liveness: ResultsManager, startup: ResultsManager
                              ) -> RuntimeParts:
    """The volumes, every container's node-wide options, then the runtime manager on them."""
    config, flags = server.config, server.flags
    pod_cgroups = machine.container_manager if config.cgroups_per_qos else None
    node_view = machine.node_view
    runtime_options = RuntimeManagerOptions(
        root_dir=flags.root_dir,
        pod_logs_dir=config.pod_logs_dir,
        cluster_dns=list(config.cluster_dns or []),
        cluster_domain=config.cluster_domain or "",
        resolv_conf=config.resolv_conf,
        node_name=node_name,
        host_ip=host_ip,
        # status.hostIP(s) in env: the Node's addresses, else this kubelet's node IP, as
        # the pod status reports them.
        host_ips=lambda: host_ips_any_way(node_view.get_node(), host_ip),
        serialize_image_pulls=config.serialize_image_pulls,
        max_parallel_image_pulls=config.max_parallel_image_pulls,
        image_credential_provider_config=flags.image_credential_provider_config,
        image_credential_provider_bin_dir=flags.image_credential_provider_bin_dir,
        credential_provider_sa_tokens=server.feature_gates().enabled(
            "KubeletServiceAccountTokenForCredentialProviders"),
        registry_pull_qps=float(config.registry_pull_qps),
        registry_burst=int(config.registry_burst),
        cpu_cfs_quota=config.cpu_cfs_quota,
        seccomp_default=config.seccomp_default,
        pod_cgroup_parent=pod_cgroups.pod_cgroup_parent if pod_cgroups is not None else None,
    )
    node_wide = runtime_options.container_options()
    # A container without a cpu or memory limit reads the node's allocatable from the
    # downward API (env and volume files), as upstream.
    allocatable = allocatable_from(machine.resources.capacity(),
                                   machine.resources.allocatable_reservation())
    allocatable_cpu_millis = (int(allocatable[CPU] * MILLI_CPU_PER_CPU) if CPU in allocatable
                              else node_wide.node_allocatable_cpu_millis)
    allocatable_memory = int(allocatable[MEMORY]) if MEMORY in allocatable else None
    volume_host = build_volume_host(
        cluster, allocatable=(allocatable_cpu_millis,
                              allocatable_memory or node_wide.memory_capacity),
        node_view=node_view)
    volume_manager = VolumeManager(
        RootDirs(flags.root_dir), deps.recorder, volume_host,
        pod_runtime_removed=lambda uid: late.pod_workers.get().should_pod_runtime_be_removed(
            uid),
        sources_ready=pod_config.sources_ready,
        torn_down=[cluster.tokens.delete_pod_tokens] if cluster is not None else [],
        stats_period=seconds(config.volume_stats_agg_period))

    async def pod_ip_for_hooks(pod: V1Pod) -> str:
        # Hooks run inside a sync, when the runtime already knows the sandbox IP
        # (the status manager may not have it yet).
        status = await late.runtime.get().get_pod_status(
            pod.metadata.uid, pod.metadata.name, pod.metadata.namespace)
        return status.ips[0] if status.ips else ""

    handler_runner = HandlerRunner(deps.runtime_service, pod_ip_for_hooks, deps.recorder)
    # Every container's node-wide options, whole before the runtime manager is built.
    container_options = dataclasses.replace(
        node_wide,
        node_allocatable_cpu_millis=allocatable_cpu_millis,
        node_allocatable_memory=allocatable_memory,
        volume_mounter=volume_manager,
        env_source=volume_host.env_source(),
        service_env_for=service_env_for(cluster.services if cluster is not None else None),
        recorder=deps.recorder,
        cpuset_for=machine.cpu_manager.cpuset_for,
        device_options_for=machine.device_manager.device_run_options)
    runtime = KubeGenericRuntimeManager(
        deps.runtime_service, deps.image_service, runtime_options,
        liveness=liveness, startup=startup, handler_runner=handler_runner,
        container_options=container_options, recorder=deps.recorder)
    late.runtime.set(runtime)
    await runtime.initialize()
    # Image GC never removes the runtime's pause image.
    sandbox_image = await runtime_sandbox_image(deps.runtime_service)
    return RuntimeParts(runtime, volume_host, volume_manager, sandbox_image)


def build_pod_parts(server: KubeletServer, deps: Dependencies, runtime: RuntimeParts,
                    machine: MachineParts, cluster: ClusterParts | None, late: LateModules, *,
                    runtime_state: RuntimeState, node_name: str, host_ip: str,
                    probe_results: tuple[ResultsManager, ResultsManager, ResultsManager]
                    ) -> PodParts:
    """The pod syncer first, then the pod workers around it (upstream's order)."""
    config, flags = server.config, server.flags
    liveness, readiness, startup = probe_results
    volume_host = runtime.volume_host
    # The pod manager registers every pod's ConfigMap and Secret references.
    pod_manager = PodManager([cluster.config_maps, cluster.secrets] if cluster is not None
                             else [])
    cache = PodCache()
    late.pod_cache.set(cache)
    pleg = GenericPLEG(runtime.manager, cache)
    late.pleg.set(pleg)
    # The status manager asks the pod workers (built below) whether a pod's
    # containers may still run before it reports a terminal phase.
    status_manager = StatusManager(
        cluster.status_sink if cluster is not None else None,
        pods=pod_manager,
        could_have_running_containers=lambda uid: (
            late.pod_workers.get().could_have_running_containers(uid)))
    probe_manager = ProbeManager(Prober(deps.runtime_service, deps.recorder), liveness=liveness,
                                 readiness=readiness, startup=startup,
                                 status_provider=status_manager.peek_pod_status)
    # spec.activeDeadlineSeconds: the sync tick syncs a pod past its deadline (a sync loop
    # handler), and that sync's status fails it (a pod sync handler).
    active_deadline = ActiveDeadlineHandler(status_provider=status_manager.peek_pod_status,
                                            recorder=deps.recorder)
    pod_cgroups = machine.container_manager if config.cgroups_per_qos else None
    syncer = KubeletPodSyncer(
        PodSyncOptions(root_dir=flags.root_dir, host_ip=host_ip,
                       runtime_type=runtime.manager.runtime_type, node_name=node_name),
        runtime.manager, status_manager, ReasonCache(), runtime_state, probe_manager,
        pod_manager=pod_manager, volume_manager=runtime.volume_manager,
        env_objects=volume_host,
        mirror_client=cluster.mirror_client if cluster is not None else None,
        get_node=machine.node_view.get_node,
        is_pod_termination_requested=lambda uid: (
            late.pod_workers.get().is_pod_termination_requested(uid)),
        container_manager=pod_cgroups, recorder=deps.recorder,
        pod_sync_handlers=[active_deadline],
        secrets=cluster.secrets if cluster is not None else None,
        # The pod workers are built around the syncer.
        abnormal_termination=lambda uid: late.pod_workers.get().abnormal_termination(uid))
    pod_workers = PodWorkers(syncer, cache, resync_interval=seconds(config.sync_frequency),
                             backoff_period=POD_WORKER_BACKOFF)
    late.pod_workers.set(pod_workers)

    def active_pods() -> list[V1Pod]:
        return filter_out_inactive_pods(pod_manager.get_pods(), pod_workers, status_manager)

    late.active_pods.set(active_pods)
    return PodParts(pod_manager, cache, pleg, status_manager, probe_manager, active_deadline,
                    pod_workers, active_pods)


def evict_with(pod_workers: PodWorkers
               ) -> Callable[[V1Pod, int, Callable[[V1PodStatus], None]], Awaitable[None]]:
    """The eviction manager's kill: an abnormal termination through the pod's worker."""

    async def evict(pod: V1Pod, grace: int, status_func: Callable[[V1PodStatus], None]) -> None:
        await pod_workers.terminate_pod_abnormally_and_wait(
            pod, grace_period_override=grace, pod_status_func=status_func, evict=True)

    return evict


def build_volume_host(cluster: ClusterParts | None, *,
                      allocatable: tuple[int, int], node_view: NodeView) -> VolumeHost:
    """What volumes read: the cluster's ConfigMap, Secret and token managers (standalone:
    none, and the reads refuse); ``allocatable`` is the node's (cpu millicores, memory
    bytes) for unset limits; ``node_view`` the Node a PV's node affinity is checked
    against."""

    def node_allocatable() -> tuple[int, int]:
        return allocatable

    if cluster is None:
        return VolumeHost(node_allocatable, node_view=node_view)
    return VolumeHost(node_allocatable, config_maps=cluster.config_maps,
                      secrets=cluster.secrets, tokens=cluster.tokens,
                      persistent_volumes=cluster.persistent_volumes, node_view=node_view)


def filter_out_inactive_pods(pods: list[V1Pod], pod_workers: PodWorkers,
                             status_manager: StatusManager) -> list[V1Pod]:
    """Upstream ``filterOutInactivePods``: pods that hold node resources.

    Out: pods whose containers are all known stopped, and pods in a terminal
    phase (in the API's status or the status manager's) unless their
    termination is still under way.
    """
    active = []
    for pod in pods:
        uid = pod_uid(pod)
        if pod_workers.is_pod_known_terminated(uid):
            continue
        status = status_manager.peek_pod_status(uid)
        terminal = ((pod.status is not None and is_terminal_phase(pod.status.phase))
                    or (status is not None and is_terminal_phase(status.phase)))
        if terminal and not pod_workers.is_pod_termination_requested(uid):
            continue
        active.append(pod)
    return active


class Kubelet:
    """The node agent: every module, the loops that drive them, and the pod handlers."""

    def __init__(self, options: KubeletOptions, *, deps: Dependencies, machine: MachineParts,
                 runtime: RuntimeParts, pods: PodParts, resources: ResourceManagers,
                 cluster: ClusterParts | None, runtime_state: RuntimeState,
                 sources_ready: Callable[[], bool],
                 admit_handlers: Sequence[PodAdmitHandler],
                 pod_resources: PodResourcesServer,
                 iptables_util_chains: IPTablesUtilChains | None) -> None:
        """The phases' parts, whole (``new_main_kubelet``); nothing is built here but
        what is derived from them (the supervisor, the views the servers read)."""
        self.options = options
        self.deps = deps
        # Every long-running loop, named (``tasks``), started by ``run``.
        self.supervisor = Supervisor()
        # The machine: its cgroups, resources, the Node as known here, and the CPU,
        # device and topology managers over its one topology.
        self.machine = machine
        # The runtime and pod parts as built; the attributes below name their members.
        self.runtime_parts = runtime
        self.pod_parts = pods
        self.runtime = runtime.manager
        # Pod volumes (set up by the pod syncs, torn down by its reconciler).
        self.volume_manager = runtime.volume_manager
        self.pod_manager = pods.pod_manager
        self.cache = pods.cache
        self.pleg = pods.pleg
        self.status_manager = pods.status_manager
        self.probe_manager = pods.probe_manager
        self.pod_workers = pods.pod_workers
        # Asked on every sync tick whether a pod needs a sync now (the active deadline).
        self.pod_sync_loop_handlers: list[PodSyncLoopHandler] = [pods.active_deadline]
        # Resource management: cgroups, eviction, garbage collection, log rotation.
        self.resources = resources
        # Exclusive CPUs and the shared pool (a topology hint provider).
        self.cpu_manager = machine.cpu_manager
        # Device plugins' registration socket and their devices.
        self.device_manager = machine.device_manager
        # Plugins found in <root>/plugins_registry: device plugins go to the device manager.
        self.plugin_manager = PluginManager(
            directory=registration_dir(options.root_dir),
            handlers={DEVICE_PLUGIN: machine.device_manager.plugin_handler})
        self.runtime_state = runtime_state
        self.sources_ready = sources_ready
        # Asked in order after the eviction manager (``can_admit_pod``).
        self.admit_handlers = list(admit_handlers)
        self.sync_loop_monitor = SyncLoopMonitor(
            threshold=max(2 * options.sync_frequency, 300.0))
        # What the kubelet API serves: resource usage, and the host side of its handlers.
        self.stats_provider = StatsProvider(
            deps.runtime_service, deps.image_service, options.node_name, options.root_dir,
            options.pod_logs_dir, volume_stats=runtime.volume_manager.stats.volumes)
        self.server_host = KubeletServerHost(self.pod_manager, self.status_manager,
                                             self.runtime, self.get_pods)
        # The pod-resources API on <root>/pod-resources/kubelet.sock.
        self.pod_resources = pod_resources
        # The iptables chains other node components read (network_linux.py); None when
        # makeIPTablesUtilChains is false.
        self.iptables_util_chains = iptables_util_chains
        # The mode: the Node, its status and lease, mirror pods, pod statuses, Services,
        # ConfigMaps, Secrets and tokens from the API server; None is standalone.
        self.cluster = cluster

    # -- start-up (upstream Kubelet.Run and initializeModules) -------------------

    async def run(self, updates: asyncio.Queue[PodUpdate]) -> None:
        """Upstream ``Kubelet.Run``: initialise, start the loops, then run the sync loop."""
        if self.cluster is None:
            klog.info("No API server defined - no node status update will be sent")
        await self.initialize_modules()
        for name, factory in self.tasks():
            self.supervisor.spawn(name, factory)
        await sync_loop(self.sync_loop_inputs(updates), self)

    def tasks(self) -> list[tuple[str, Callable[[], Coroutine[Any, Any, Any]]]]:
        """The long-running loops, named, in upstream's order: runtime health first (pods
        wait on it) and the iptables utility chains right after it (with
        makeIPTablesUtilChains), then in cluster mode the node status and lease, pod
        statuses and what pods read from the API server, then garbage collection,
        eviction and the log manager, the CPU manager's reconcile loop (not under policy
        ``none``), the device manager's registration server, the plugin manager (the
        plugins_registry watcher), the pod-resources API, the
        volume manager, and PLEG.
        The probe manager's workers start per pod; the sync loop itself runs last, in
        ``run``. Every one is restarted after a crash (``util/supervisor.py``)."""
        tasks: list[tuple[str, Callable[[], Coroutine[Any, Any, Any]]]] = [
            ("runtime-up", self.update_runtime_up_forever)]
        if self.iptables_util_chains is not None:
            tasks.append(("iptables-util-chains", self.iptables_util_chains.run))
        certificates = self.deps.client_certificate_manager
        if certificates is not None:
            tasks.append(("client-certificate-rotation", certificates.run))
        if self.cluster is not None:
            tasks += self.cluster.tasks(self.update_runtime_up, self.status_manager)
        # Upstream's StartGarbageCollection, the eviction manager and the log manager.
        tasks += self.resources.tasks(self.sources_ready, self.cached_pod_status)
        if self.cpu_manager.reconciles:
            tasks.append(("cpu-manager-reconcile", self.cpu_manager.run))
        tasks.append(("device-manager", self.device_manager.run))
        tasks.append(("plugin-manager", self.plugin_manager.run))
        tasks.append(("pod-resources", lambda: serve_pod_resources(
            self.pod_resources, pod_resources_socket(self.options.root_dir))))
        tasks.append(("volume-manager", self.volume_manager.run))
        tasks.append(("pleg", self.pleg.run))
        return tasks

    async def initialize_modules(self) -> None:
        """Upstream ``initializeModules``: what must exist before any pod is synced.

        The data directories are created only now, after validation, so that a
        bad configuration never leaves anything behind on the node.
        """
        root = self.options.root_dir
        for directory in (root, pods_dir(root), plugins_dir(root),
                          self.options.pod_logs_dir):
            await asyncio.to_thread(self.deps.os_interface.makedirs, directory, 0o750)
        # The node's cgroups must be right before any pod starts: a cgroup v1 host
        # with failCgroupV1, a driver other than the runtime's, reservations beyond
        # capacity or a missing cgroupRoot stop the kubelet here.
        await start_container_manager(self.resources.container_manager,
                                      self.deps.runtime_service)
        # The CPU manager's checkpoint must match this machine and policy, else stop.
        await asyncio.to_thread(self.cpu_manager.start)
        # Device assignments from the checkpoint, before any pod is admitted.
        await self.device_manager.start()

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
            on_housekeeping_done=self.on_housekeeping_done,
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
        if self.cluster is not None:
            await self.cluster.stop()

    # -- directories ---------------------------------------------------------

    # -- handlers called by the sync loop ----------------------------------------

    async def handle_pod_additions(self, pods: list[V1Pod]) -> None:
        """Upstream ``HandlePodAdditions``: admit each new pod (oldest first) and start it."""
        start = time.monotonic()
        for added in sorted(pods, key=_creation_key):
            existing = self.pod_manager.get_pods()
            self.pod_manager.add_pod(added)
            pod, mirror_pod, was_mirror = self.pod_manager.get_pod_and_mirror_pod(added)
            if was_mirror:
                if pod is None:
                    klog.v(2).info("Unable to find pod for mirror pod, skipping",
                                   mirrorPod=pod_ref(added), mirrorPodUID=pod_uid(added))
                    continue
                self._update_worker(pod, mirror_pod, SyncPodType.UPDATE, start)
                continue
            assert pod is not None
            if self.pod_workers.is_pod_termination_requested(pod_uid(pod)):
                continue
            # Rejected pods are Failed, so the active pods are every admitted pod alive.
            rejection = await self.can_admit_pod(self.filter_out_inactive_pods(existing),
                                                 pod)
            if rejection is not None:
                self.reject_pod(pod, *rejection)
                continue
            self._update_worker(pod, mirror_pod, SyncPodType.CREATE, start)

    def handle_pod_updates(self, pods: list[V1Pod]) -> None:
        start = time.monotonic()
        for updated in pods:
            self.pod_manager.update_pod(updated)
            pod, mirror_pod, _ = self.pod_manager.get_pod_and_mirror_pod(updated)
            if pod is None:
                continue  # a mirror pod whose static pod is gone: housekeeping deletes it
            self._update_worker(pod, mirror_pod, SyncPodType.UPDATE, start)

    def handle_pod_removes(self, pods: list[V1Pod]) -> None:
        start = time.monotonic()
        for removed in pods:
            self.pod_manager.remove_pod(removed)
            pod, _, was_mirror = self.pod_manager.get_pod_and_mirror_pod(removed)
            if was_mirror:
                # The static pod keeps running; its next sync recreates the mirror pod.
                if pod is not None:
                    self._update_worker(pod, None, SyncPodType.UPDATE, start)
                continue
            self.pod_workers.update_pod(UpdatePodOptions(
                update_type=SyncPodType.KILL, pod=removed, start_time=start,
                kill_pod_options=KillPodOptions()))

    def handle_pod_reconcile(self, pods: list[V1Pod]) -> None:
        """Only the status changed in the source: remember it (the status manager compares)."""
        for reconciled in pods:
            self.pod_manager.update_pod(reconciled)
            pod, mirror_pod, _ = self.pod_manager.get_pod_and_mirror_pod(reconciled)
            # Someone else's readiness-gate condition changed: recompute Ready.
            if pod is not None and pod.spec.readiness_gates:
                self._update_worker(pod, mirror_pod, SyncPodType.SYNC, time.monotonic())

    def handle_pod_syncs(self, pods: list[V1Pod]) -> None:
        for pod in pods:
            self.dispatch_work(pod, SyncPodType.SYNC)

    def dispatch_work(self, pod: V1Pod, update_type: SyncPodType) -> None:
        self._update_worker(pod, self.pod_manager.get_mirror_pod_by_pod(pod), update_type,
                            time.monotonic())
        if update_type == SyncPodType.CREATE:
            metrics.CONTAINERS_PER_POD_COUNT.observe(len(pod.spec.containers or []))

    def _update_worker(self, pod: V1Pod, mirror_pod: V1Pod | None, update_type: SyncPodType,
                       start: float) -> None:
        self.pod_workers.update_pod(UpdatePodOptions(
            update_type=update_type, pod=pod, mirror_pod=mirror_pod, start_time=start))

    def filter_out_inactive_pods(self, pods: list[V1Pod]) -> list[V1Pod]:
        return filter_out_inactive_pods(pods, self.pod_workers, self.status_manager)

    async def can_admit_pod(self, active_pods: list[V1Pod], pod: V1Pod
                            ) -> tuple[str, str] | None:
        """Upstream ``canAdmitPod``: (reason, message) of the first handler that refuses.

        The eviction manager answers first, as upstream registers it first: a
        node under pressure takes no new pods it would have to evict.
        """
        refused = self.resources.eviction.admit(pod)
        if refused is not None:
            return refused
        attrs = PodAdmitAttributes(pod, [p for p in active_pods if pod_uid(p) != pod_uid(pod)])
        for handler in self.admit_handlers:
            result = await handler.admit(attrs)
            if not result.admit:
                return result.reason, result.message
        return None

    def on_container_died(self, uid: str, container_id: str) -> None:
        """The sync loop's ContainerDied seam (upstream ``cleanUpContainersInPod``): the
        pod's dead containers and, once its content may go, its idle sandboxes."""
        self.resources.container_gc.container_died(uid, container_id)

    def cached_pod_status(self, uid: str) -> PodStatus | None:
        status, _ = self.cache.get(uid)
        return status

    def reject_pod(self, pod: V1Pod, reason: str, message: str) -> None:
        klog.info("Pod admission denied", pod=pod_ref(pod), reason=reason, message=message)
        self.deps.recorder.event(pod, WARNING, reason, message)
        self.status_manager.set_pod_status(pod, V1PodStatus(
            phase="Failed", reason=reason, message=f"Pod was rejected: {message}"))

    def _is_terminal(self, pod: V1Pod) -> bool:
        status = self.status_manager.peek_pod_status(pod_uid(pod))
        return status is not None and is_terminal_phase(status.phase)

    def pods_to_sync(self) -> list[V1Pod]:
        """Upstream ``getPodsToSync``: due in the work queue, or wanted now by a handler."""
        return get_pods_to_sync(pods=self.pod_manager.get_pods(),
                                due_uids=self.pod_workers.work_queue.get_work(),
                                sync_loop_handlers=self.pod_sync_loop_handlers)

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

        # Pods that still run in the runtime but have no source and no worker are killed.
        # What stopped pods leave (dead containers, sandboxes, log directories) is the
        # container GC's to remove, as upstream: at once for dead containers of a pod whose
        # content may go, within a GC period (a minute) for the rest.
        for runtime_pod in await self.runtime.get_pods(all_pods=True):
            uid = runtime_pod.id
            if uid not in desired and uid not in worker_states and _still_running(runtime_pod):
                workers.update_pod(UpdatePodOptions(
                    update_type=SyncPodType.KILL, pod=None, running_pod=runtime_pod,
                    start_time=time.monotonic(), kill_pod_options=KillPodOptions()))

        await asyncio.to_thread(self._remove_orphaned_pod_dirs, set(desired))
        await self.delete_orphaned_mirror_pods()
        await self._remove_orphaned_pod_cgroups(set(desired), set(worker_states))

    async def delete_orphaned_mirror_pods(self) -> None:
        """Mirror pods whose static pod is gone (and has finished stopping) are deleted."""
        if self.cluster is None:
            return  # standalone: no mirror pods
        for full_name in self.pod_manager.get_orphaned_mirror_pod_names():
            if self.pod_workers.is_pod_for_mirror_pod_terminating_by_full_name(full_name):
                continue
            try:
                await self.cluster.mirror_client.delete_mirror_pod(full_name, None)
            except Exception as err:
                klog.error("Failed deleting orphaned mirror pod", err, podFullName=full_name)

    async def _remove_orphaned_pod_cgroups(self, desired: set[str], known: set[str]) -> None:
        """Upstream ``cleanupOrphanedPodCgroups``: once nothing of a pod can run any more."""
        if not self.resources.container_manager.config.cgroups_per_qos:
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
            # The volume manager's reconciler unmounts and removes the volumes; until it
            # has, the directory stays. Its answer holds while the directory is removed.
            with self.volume_manager.pod_dir_removal(uid) as removable:
                if not removable:
                    continue
                klog.v(2).info("Removing directory of a deleted pod", podUID=uid)
                shutil.rmtree(pod_dir(self.options.root_dir, uid), ignore_errors=True)

    # -- views ----------------------------------------------------------

    def get_pods(self) -> list[V1Pod]:
        """Desired pods with their latest API status (the read-only ``/pods``)."""
        return [self.status_manager.pod_with_status(pod) for pod in self.pod_manager.get_pods()]

    def container_images(self) -> dict[str, str]:
        """``<pod uid>/<container>`` -> image, for the ``image`` label of cAdvisor series."""
        images: dict[str, str] = {}
        for pod in self.pod_manager.get_pods():
            for container in init_then_app_containers(pod):
                images[f"{pod_uid(pod)}/{container.name}"] = container.image or ""
        return images

    # -- clean-up after housekeeping ---------------------------------------------

    def on_housekeeping_done(self) -> None:
        """The pods whose death events came before their content could be removed (still
        terminating; a source's removal, forgotten by this housekeeping) lose what is
        left of them now rather than at the next container GC pass."""
        self.resources.container_gc.queue_removable_pods()


def _still_running(pod: Pod) -> bool:
    """A runtime pod with a running container or a ready sandbox still needs a kill."""
    return any(c.state == ContainerState.RUNNING for c in (*pod.containers, *pod.sandboxes))


def _creation_key(pod: V1Pod) -> float:
    created = pod.metadata.creation_timestamp
    return created.timestamp() if created is not None else 0.0

