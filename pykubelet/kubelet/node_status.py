"""Assembling the node's status, lease and Node cache for ``new_main_kubelet`` (cluster mode).

Upstream builds these inside ``NewMainKubelet`` (the node informer, the lease
controller) and ``defaultNodeStatusFuncs`` (the setters); here one function
does it from the configuration and the ``Dependencies``, so ``kubelet.py``
only keeps the result. Nothing is started: ``Kubelet.run`` starts the cache,
the status loop, the fast first update and the lease, in that order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes_asyncio.client import CoreV1Api, V1Node, V1Taint

from pykubelet.client.informer import ObjectInformer
from pykubelet.config.server import KubeletServer
from pykubelet.config.units import seconds
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.nodelease import ApiLeases, NodeLeaseController
from pykubelet.nodestatus import (
    MachineResources,
    NodeResources,
    NodeStatusManager,
    NodeStatusOptions,
    NoPressure,
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
from pykubelet.util import klog


@dataclass
class NodeParts:
    informer: ObjectInformer[V1Node]
    status: NodeStatusManager
    lease: NodeLeaseController


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
                              reservation: Callable[[], ResourceList]
                              ) -> tuple[MachineInfo, MachineResources]:
    """The machine (upstream's cAdvisor MachineInfo), and its capacity with ``reservation``
    (the container manager's) held back for allocatable."""
    machine = await asyncio.to_thread(read_machine_info)
    storage = None
    if server.config.local_storage_capacity_isolation:
        storage = await asyncio.to_thread(filesystem_capacity, server.flags.root_dir)
    return machine, MachineResources(machine, storage, reservation)


async def build_node_parts(server: KubeletServer, deps: Dependencies, node_name: str,
                           health: RuntimeHealth, machine: MachineInfo,
                           resources: NodeResources,
                           pressure: PressureReporter | None = None,
                           informer: ObjectInformer[V1Node] | None = None) -> NodeParts:
    """The Node cache, the status manager with upstream's setters, and the lease controller."""
    config, flags = server.config, server.flags
    external_cloud_provider = flags.external_cloud_provider
    version = await asyncio.to_thread(read_version_info)
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
        on_repeated_heartbeat_failure=deps.on_heartbeat_failure)
    status.set_setters(node_status_setters(
        status, node_ips=flags.node_ips(), hostname=node_name, machine=machine, version=version,
        resources=resources, max_pods=config.max_pods, pods_per_core=config.pods_per_core,
        daemon_port=config.port, max_images=config.node_status_max_images,
        image_list=CRIImageList(deps.image_service),
        runtime_version=CRIRuntimeVersion(deps.runtime_service),
        health=health, pressure=pressure or NoPressure(),
        local_storage_capacity_isolation=config.local_storage_capacity_isolation,
        external_cloud_provider=external_cloud_provider))
    lease = NodeLeaseController(
        ApiLeases(deps.heartbeat_client), node_name, config.node_lease_duration_seconds,
        on_repeated_heartbeat_failure=deps.on_heartbeat_failure)
    klog.info("Node status and lease configured", node=node_name,
              updateFrequency=f"{options.update_frequency:g}s",
              leaseDuration=f"{config.node_lease_duration_seconds}s",
              renewInterval=f"{lease.renew_interval:g}s",
              externalCloudProvider=external_cloud_provider)
    return NodeParts(informer=informer, status=status, lease=lease)


__all__ = ["NodeParts", "build_node_parts", "new_node_informer", "read_node_resources"]
