"""Resource management wired together: container manager, GC, log rotation, eviction.

The composition root builds these in two steps because they depend on each
other in both directions:

1. ``new_container_manager`` before the runtime manager (whose sandboxes
   need ``pod_cgroup_parent``);
2. ``build_resource_managers`` once the runtime manager and the pod workers
   exist (the garbage collectors need the runtime, eviction needs the active
   pods and a way to kill one). Its eviction manager is also the node status's
   pressure reporter, which the cluster parts read late (``LateModules``).

The container manager asks for the active pods only once it runs (its QoS
cgroup updates), so it is built with a function that reads them late; the
eviction manager reclaims through the garbage collectors built before it.

``start_container_manager`` is the start-up gate (upstream ``initializeModules``
/ ``containerManager.Start``): the cgroup version against ``failCgroupV1``,
the runtime's cgroup driver against ``cgroupDriver``, reservations against
capacity, the kernel tunables against ``protectKernelDefaults``, then the
cgroup tree. Any failure is a ``ContainerManagerError``
naming the field; the kubelet exits with it. ``tasks`` lists the periodic
loops to run under the supervisor.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1ObjectMeta, V1Pod, V1PodStatus

from pykubelet.cm import (
    CgroupManager,
    ContainerManager,
    ContainerManagerError,
    NodeConfig,
    check_cgroup_version,
    runtime_cgroup_driver_from_status_info,
)
from pykubelet.cm.cpumanager import cpuset
from pykubelet.cm.helpers import DEFAULT_CFS_PERIOD_US, read_pid_max
from pykubelet.config.server import KubeletServer
from pykubelet.config.units import (
    EvictionThreshold,
    Quantity,
    UnitError,
    parse_eviction_thresholds,
    seconds,
)
from pykubelet.container import PodStatus
from pykubelet.cri import ImageService, RuntimeService
from pykubelet.cri.errors import CRIError
from pykubelet.events import EventRecorder
from pykubelet.eviction import EvictionConfig, EvictionManager, SignalSources, observe, pod_usage
from pykubelet.eviction.manager import with_allocatable_thresholds
from pykubelet.images import ImageGCManager, ImageGCPolicy
from pykubelet.kuberuntime import KubeGenericRuntimeManager
from pykubelet.kuberuntime.gc import ContainerGC, GCPolicy, PodStateProvider
from pykubelet.logs import ContainerLogManager, LogRotatePolicy
from pykubelet.stats import ImageFsStatsProvider
from pykubelet.util import klog


def eviction_thresholds(server: KubeletServer) -> list[EvictionThreshold]:
    """The parsed eviction settings; a value that does not parse names its field."""
    config = server.config
    try:
        thresholds = parse_eviction_thresholds(
            dict(config.eviction_hard), dict(config.eviction_soft),
            dict(config.eviction_soft_grace_period), dict(config.eviction_minimum_reclaim))
    except UnitError as err:
        raise ContainerManagerError(
            f"evictionHard/evictionSoft/evictionSoftGracePeriod/evictionMinimumReclaim: {err}"
        ) from err
    return with_allocatable_thresholds(thresholds, config.enforce_node_allocatable)


def node_reservations(server: KubeletServer) -> tuple[dict[str, str], dict[str, str]]:
    """``systemReserved`` and ``kubeReserved`` as node allocatable counts them. With
    ``reservedSystemCPUs``, its CPU count is the whole cpu reservation (upstream's
    server.go): it goes into systemReserved and kubeReserved's cpu is dropped."""
    config = server.config
    system, kube = dict(config.system_reserved), dict(config.kube_reserved)
    try:
        reserved = cpuset.parse(config.reserved_system_cpus)
    except cpuset.CPUSetError as err:
        raise ContainerManagerError(
            f"reservedSystemCPUs: {config.reserved_system_cpus!r}: {err}") from err
    if reserved:
        klog.info("Option --reserved-cpus is specified, it will overwrite the cpu setting in "
                  "KubeReserved and SystemReserved", kubeReserved=kube, systemReserved=system)
        kube.pop("cpu", None)
        system["cpu"] = str(len(reserved))
    return system, kube


def new_container_manager(server: KubeletServer, *,
                          active_pods: Callable[[], Iterable[V1Pod]]) -> ContainerManager:
    config = server.config
    period = config.cpu_cfs_quota_period
    period_us = int(seconds(period) * 1_000_000) if period else DEFAULT_CFS_PERIOD_US
    system_reserved, kube_reserved = node_reservations(server)
    node = NodeConfig(
        cgroup_root=config.cgroup_root or "/",
        cgroups_per_qos=config.cgroups_per_qos,
        cgroup_driver=config.cgroup_driver,
        enforce_node_allocatable=list(config.enforce_node_allocatable),
        system_reserved=system_reserved,
        kube_reserved=kube_reserved,
        system_reserved_cgroup=config.system_reserved_cgroup,
        kube_reserved_cgroup=config.kube_reserved_cgroup,
        hard_eviction_thresholds=[t for t in eviction_thresholds(server) if t.hard],
        pod_pids_limit=config.pod_pids_limit,
        cpu_cfs_quota=config.cpu_cfs_quota,
        cpu_cfs_quota_period_us=period_us,
        fail_cgroup_v1=config.fail_cgroup_v1,
        root_dir=server.flags.root_dir,
        protect_kernel_defaults=config.protect_kernel_defaults,
        kubelet_in_user_namespace=server.feature_gates().enabled("KubeletInUserNamespace"),
    )
    return ContainerManager(node, CgroupManager(config.cgroup_driver), active_pods=active_pods)


async def runtime_cgroup_driver(runtime_service: RuntimeService) -> str | None:
    """The runtime's cgroup driver: CRI RuntimeConfig, else containerd's verbose Status."""
    try:
        response = await runtime_service.runtime_config()
        if response.HasField("linux"):
            return "systemd" if response.linux.cgroup_driver == api_pb2.SYSTEMD else "cgroupfs"
    except CRIError as err:
        klog.v(2).info("The runtime does not answer RuntimeConfig; reading its status",
                       err=str(err))
    try:
        status = await runtime_service.status(verbose=True)
    except CRIError:
        return None
    return runtime_cgroup_driver_from_status_info(dict(status.info))


async def runtime_sandbox_image(runtime_service: RuntimeService) -> str:
    """The runtime's pause image (containerd's ``sandboxImage``), which image GC never removes."""
    try:
        status = await runtime_service.status(verbose=True)
        config = json.loads(dict(status.info).get("config") or "{}")
    except (CRIError, ValueError):
        return ""
    image = config.get("sandboxImage") if isinstance(config, dict) else None
    return image if isinstance(image, str) else ""


async def start_container_manager(manager: ContainerManager,
                                  runtime_service: RuntimeService) -> None:
    """The start-up checks and the cgroup tree; raises ``ContainerManagerError``."""
    check_cgroup_version(manager.config.fail_cgroup_v1, manager.cgroups.version)
    manager.check_runtime_driver(await runtime_cgroup_driver(runtime_service))
    await asyncio.to_thread(manager.start)


@dataclass(frozen=True)
class GarbageReclaimer:
    """Eviction's node-level reclaim (``NodeReclaimer``) through the garbage collectors."""

    container_gc: ContainerGC
    image_gc: ImageGCManager

    async def delete_all_unused_containers(self) -> None:
        """Every dead container not needed by a live pod."""
        await self.container_gc.garbage_collect(True, evict_non_deleted_pods=True)

    async def delete_unused_images(self) -> None:
        await self.image_gc.delete_unused_images()


@dataclass(frozen=True)
class ResourceManagers:
    container_manager: ContainerManager
    container_gc: ContainerGC
    image_gc: ImageGCManager
    log_manager: ContainerLogManager
    eviction: EvictionManager

    def tasks(self, sources_ready: Callable[[], bool],
              pod_status: Callable[[str], PodStatus | None]
              ) -> list[tuple[str, Callable[[], Coroutine[Any, Any, Any]]]]:
        return [
            ("container-gc", lambda: self.container_gc.run(sources_ready)),
            ("container-deletor", lambda: self.container_gc.run_deletor(pod_status)),
            ("image-gc", self.image_gc.run),
            ("container-log-manager", self.log_manager.run),
            ("eviction-manager", self.eviction.run),
            ("qos-cgroups", self.container_manager.run_qos_updates),
        ]


def build_resource_managers(
    server: KubeletServer, container_manager: ContainerManager,
    runtime_service: RuntimeService, image_service: ImageService,
    runtime: KubeGenericRuntimeManager, pods: PodStateProvider, *,
    active_pods: Callable[[], list[V1Pod]],
    kill_pod: Callable[[V1Pod, int, Callable[[V1PodStatus], None]], Awaitable[None]],
    recorder: EventRecorder, node_name: str, sandbox_image: str,
) -> ResourceManagers:
    config = server.config
    flags = server.flags
    node_ref = V1Pod(metadata=V1ObjectMeta(name=node_name))  # only its name is read
    container_gc = ContainerGC(runtime, pods, GCPolicy(
        min_age=seconds(flags.minimum_container_ttl_duration),
        max_per_pod_container=flags.maximum_dead_containers_per_container,
        max_containers=flags.maximum_dead_containers))
    image_fs = ImageFsStatsProvider(image_service, fallback_path=flags.root_dir)
    image_gc = ImageGCManager(runtime, image_service, image_fs.image_fs, ImageGCPolicy(
        high_threshold_percent=config.image_gc_high_threshold_percent,
        low_threshold_percent=config.image_gc_low_threshold_percent,
        min_age=seconds(config.image_minimum_gc_age),
        max_age=seconds(config.image_maximum_gc_age)),
        recorder=recorder, node_ref=node_ref, sandbox_image=sandbox_image)
    log_manager = ContainerLogManager(
        runtime_service,
        LogRotatePolicy(max_size=math.ceil(Quantity.parse(config.container_log_max_size).value),
                        max_files=config.container_log_max_files),
        workers=config.container_log_max_workers,
        monitor_interval=seconds(config.container_log_monitor_interval))
    cgroups = container_manager.cgroups
    capacity = container_manager.capacity.values
    allocatable = container_manager.allocatable_absolute()
    sources = SignalSources(
        memory_capacity=int(capacity.get("memory", 0)),
        node_working_set=lambda: cgroups.memory_stats(()).working_set,
        nodefs_path=flags.root_dir,
        image_fs=image_fs.image_fs,
        allocatable_memory=int(allocatable.get("memory", 0))
        if config.cgroups_per_qos and "pods" in config.enforce_node_allocatable else 0,
        pods_working_set=lambda: cgroups.memory_stats(container_manager.root).working_set,
        pid_max=read_pid_max())
    eviction = EvictionManager(
        EvictionConfig(thresholds=eviction_thresholds(server),
                       pressure_transition_period=seconds(
                           config.eviction_pressure_transition_period),
                       max_pod_grace_period=config.eviction_max_pod_grace_period),
        lambda: observe(sources),
        lambda disk: pod_usage(runtime_service, config.pod_logs_dir if disk else None),
        active_pods, kill_pod,
        reclaimer=GarbageReclaimer(container_gc, image_gc), recorder=recorder,
        node_ref=node_ref)
    return ResourceManagers(container_manager, container_gc, image_gc, log_manager, eviction)


__all__ = [
    "GarbageReclaimer",
    "ResourceManagers",
    "build_resource_managers",
    "eviction_thresholds",
    "new_container_manager",
    "runtime_cgroup_driver",
    "start_container_manager",
]
