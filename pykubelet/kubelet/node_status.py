"""What only a kubelet with an API server has (``ClusterParts``), for ``new_main_kubelet``.

Upstream builds these inside ``NewMainKubelet`` (the node informer, the lease
controller, the mirror client, the ConfigMap/Secret/token managers, the
Service informer) and ``defaultNodeStatusFuncs`` (the setters); here one
function builds them all from the configuration and the ``Dependencies``, so
``kubelet.py`` decides the mode once: ``cluster`` is a ``ClusterParts`` or
``None`` (standalone). Nothing is started: ``ClusterParts.tasks`` lists the
loops ``Kubelet.run`` starts, in upstream's order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import CoreV1Api, V1Node, V1Taint

from pykubelet.client.informer import ObjectInformer
from pykubelet.config.server import KubeletServer
from pykubelet.config.units import seconds
from pykubelet.envvars import ServiceStore
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.mirror_client import ApiMirrorClient, MirrorClient
from pykubelet.kubelet.node_info import NodeView
from pykubelet.kubelet.volume_host import PersistentVolumeReader
from pykubelet.nodelease import ApiLeases, NodeLeaseController
from pykubelet.nodestatus import (
    MachineResources,
    NodeResources,
    NodeStatusManager,
    NodeStatusOptions,
    PressureReporter,
    RuntimeHealth,
    node_status_setters,
)
from pykubelet.nodestatus.machine import (
    MachineInfo,
    filesystem_capacity,
    read_machine_info,
    read_version_info,
)
from pykubelet.nodestatus.providers import CRIImageList, CRIRuntimeVersion
from pykubelet.nodestatus.resources import ResourceList
from pykubelet.nodestatus.setters import DeviceCapacity
from pykubelet.objectcache import Manager, new_configmap_manager, new_secret_manager, ttl_from_node
from pykubelet.status import StatusManager
from pykubelet.status.apiclient import ApiStatusSink
from pykubelet.status.manager import StatusSink
from pykubelet.token import TokenManager
from pykubelet.util import klog
from pykubelet.util.late import LateBound
from pykubelet.util.reflector import ApiListWatch, Reflector


@dataclass(frozen=True)
class ClusterParts:
    """Everything that exists only with an API server; a standalone kubelet has none of it.

    The Node (its watched copy, its status and its lease), the mirror pods of
    static pods, pod statuses written to the API server, the Services behind
    service-link variables, and the ConfigMaps, Secrets, service-account
    tokens and PersistentVolume(Claim)s that volumes and environments read.
    """

    node_informer: ObjectInformer[V1Node]
    node_status: NodeStatusManager
    lease: NodeLeaseController
    mirror_client: MirrorClient
    status_sink: StatusSink
    services: ServiceStore
    service_reflector: Reflector
    config_maps: Manager
    secrets: Manager
    tokens: TokenManager
    persistent_volumes: PersistentVolumeReader

    def tasks(self, update_runtime_up: Callable[[], Awaitable[None]],
              status_manager: StatusManager
              ) -> list[tuple[str, Callable[[], Coroutine[Any, Any, Any]]]]:
        """The cluster's loops in upstream's order: the Node cache, its status (which checks
        the runtime once before its first sync, as does the fast first update before each
        try), the lease (which waits for neither), pod statuses, the Services, then the
        token refresher."""
        status = self.node_status
        return [
            ("node-informer", self.node_informer.run),
            ("node-status", lambda: status.run(check_runtime=update_runtime_up)),
            ("node-status-fast-update",
             lambda: status.fast_status_update_once(update_runtime_up)),
            ("node-lease", self.lease.run),
            ("status-manager", status_manager.run),
            ("service-informer", self.service_reflector.run),
            ("token-cleanup", self.tokens.run),
        ]

    async def stop(self) -> None:
        """The ConfigMap and Secret watches end; the loops are the supervisor's to stop."""
        for manager in (self.config_maps, self.secrets):
            await manager.stop()


class LatePressure:
    """The eviction manager's pressure for the node conditions: the eviction manager is
    built after the pod workers, which need the cluster parts (``pykubelet.util.late``)."""

    def __init__(self, late: LateBound[PressureReporter]) -> None:
        self._late = late

    def is_under_memory_pressure(self) -> bool:
        return self._late.get().is_under_memory_pressure()

    def is_under_disk_pressure(self) -> bool:
        return self._late.get().is_under_disk_pressure()

    def is_under_pid_pressure(self) -> bool:
        return self._late.get().is_under_pid_pressure()


def new_node_informer(deps: Dependencies, node_name: str) -> ObjectInformer[V1Node] | None:
    """The watched copy of this node's Node object (upstream's node informer); None standalone.

    Built before the pod sources: the API pod source waits for it to sync so
    that admission sees the node's labels and allocatable.
    """
    if deps.kube_client is None:
        return None
    return ObjectInformer(CoreV1Api(deps.kube_client).list_node, V1Node, node_name,
                          f"node {node_name}")


async def read_node_resources(server: KubeletServer,
                              reservation: Callable[[], ResourceList], *, host_root: str
                              ) -> tuple[MachineInfo, MachineResources]:
    """The machine under ``host_root`` (upstream's cAdvisor MachineInfo), and its capacity
    with ``reservation`` (the container manager's) held back for allocatable."""
    machine = await asyncio.to_thread(read_machine_info, host_root)
    storage = None
    if server.config.local_storage_capacity_isolation:
        storage = await asyncio.to_thread(filesystem_capacity, server.flags.root_dir)
    return machine, MachineResources(machine, storage, reservation)


async def build_cluster_parts(server: KubeletServer, deps: Dependencies, node_name: str, *,
                              informer: ObjectInformer[V1Node] | None, node_view: NodeView,
                              health: RuntimeHealth, machine: MachineInfo,
                              resources: NodeResources,
                              pressure: PressureReporter,
                              device_capacity: DeviceCapacity | None = None) -> ClusterParts:
    """The Node cache, the status manager with upstream's setters, the lease controller,
    and what pods read from or write to the API server."""
    config, flags = server.config, server.flags
    external_cloud_provider = flags.external_cloud_provider
    version = await asyncio.to_thread(read_version_info, deps.host_root)
    if informer is None:
        informer = new_node_informer(deps, node_name)
    assert informer is not None, "cluster mode needs an API client"
    options = NodeStatusOptions(
        node_name=node_name,
        hostname=node_name,
        register_node=config.register_node,
        register_with_taints=[V1Taint(key=t.key, value=t.value or None, effect=t.effect)
                              for t in config.register_with_taints],
        node_labels=dict(flags.node_labels),
        provider_id=config.provider_id,
        external_cloud_provider=external_cloud_provider,
        enable_controller_attach_detach=config.enable_controller_attach_detach,
        update_frequency=seconds(config.node_status_update_frequency),
        report_frequency=seconds(config.node_status_report_frequency),
    )
    status = NodeStatusManager(
        options, CoreV1Api(deps.kube_client), CoreV1Api(deps.heartbeat_client), informer,
        deps.recorder, server=str(getattr(deps.kube_client, "host", "")),
        on_repeated_heartbeat_failure=deps.on_heartbeat_failure,
        setters=lambda manager: node_status_setters(
            manager, node_ips=flags.node_ips(), hostname=node_name, machine=machine,
            version=version, resources=resources, max_pods=config.max_pods,
            pods_per_core=config.pods_per_core, daemon_port=config.port,
            max_images=config.node_status_max_images,
            image_list=CRIImageList(deps.image_service),
            runtime_version=CRIRuntimeVersion(deps.runtime_service),
            health=health, pressure=pressure,
            local_storage_capacity_isolation=config.local_storage_capacity_isolation,
            external_cloud_provider=external_cloud_provider,
            device_capacity=device_capacity))
    lease = NodeLeaseController(
        ApiLeases(deps.heartbeat_client), node_name, config.node_lease_duration_seconds,
        on_repeated_heartbeat_failure=deps.on_heartbeat_failure)
    klog.info("Node status and lease configured", node=node_name,
              updateFrequency=f"{options.update_frequency:g}s",
              leaseDuration=f"{config.node_lease_duration_seconds}s",
              renewInterval=f"{lease.renew_interval:g}s",
              externalCloudProvider=external_cloud_provider)
    api = CoreV1Api(deps.kube_client)
    # ConfigMaps and Secrets through the configured change-detection strategy; the Cache
    # strategy's TTL comes from the Node.
    strategy = config.config_map_and_secret_change_detection_strategy
    get_ttl = ttl_from_node(node_view.get_node)
    # Service links: every Service, kept by a reflector run with the kubelet.
    services = ServiceStore()
    return ClusterParts(
        node_informer=informer, node_status=status, lease=lease,
        mirror_client=ApiMirrorClient(deps.kube_client, node_name, node_view.node_uid),
        status_sink=ApiStatusSink(deps.kube_client),
        services=services,
        service_reflector=Reflector("services", ApiListWatch(
            api.list_service_for_all_namespaces), services),
        config_maps=new_configmap_manager(api, strategy, get_ttl),
        secrets=new_secret_manager(api, strategy, get_ttl),
        tokens=TokenManager.for_api(api),
        persistent_volumes=PersistentVolumeReader.for_api(api))


__all__ = ["ClusterParts", "LatePressure", "build_cluster_parts", "new_node_informer",
           "read_node_resources"]
