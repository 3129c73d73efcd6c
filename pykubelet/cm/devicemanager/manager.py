"""The device plugin manager the kubelet holds (upstream ``devicemanager/manager.go``).

A facade over three parts, each along upstream's lines:

- ``registry.PluginRegistry``: plugin registration on ``kubelet.sock``, each
  plugin's ``ListAndWatch``, device health, the node's capacity, and the expiry of
  a plugin gone for the grace period;
- ``allocator.DeviceAllocator``: which devices a container gets at admission, and
  freeing the devices of pods that are gone;
- ``topology_hints``: the NUMA hints, pure functions over the data gathered here.

What it adds itself: start (the checkpoint restored before any pod is admitted),
housekeeping (``run``: the socket recreated if removed, stopped plugins expired,
on every node, standalone or not), the containers' device options, the
pod-resources API's answers, and the checkpoint (``checkpoint.py``), written on
every change so a restart neither loses nor hands out twice a device in use; the
resources it names wait with no devices until their plugins register again.

Every method runs on the event loop.

Deliberate differences from upstream, both about a restarted kubelet re-admitting
running pods (one at a time, in creation order, before their plugins re-register):

- a pod that is not active yet keeps its devices while the runtime still runs its
  containers (upstream frees every pod not yet re-added to the pod manager, so the
  first pod admitted could take a running pod's device);
- a container that holds its devices (from the checkpoint) and that the runtime ran
  when the kubelet started needs nothing at admission, whatever the sources'
  readiness (upstream checks this only until all sources are ready, its issue 118559,
  and refuses such a pod while its plugin has not re-registered).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence, Set
from typing import NamedTuple

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Node, V1NodeStatus, V1Pod

from pykubelet.api import clone, pod_uid
from pykubelet.api.kubetypes import CONTAINER_NAME_LABEL, POD_UID_LABEL
from pykubelet.api.quantity import parse_quantity
from pykubelet.cm.devicemanager import checkpoint
from pykubelet.cm.devicemanager.allocator import (
    AffinityLookup,
    DeviceAllocator,
    RunningContainers,
)
from pykubelet.cm.devicemanager.checkpoint import (
    CHECKPOINT_NAME,
    NODE_WITHOUT_TOPOLOGY,
    CheckpointData,
    CheckpointError,
)
from pykubelet.cm.devicemanager.endpoint import (
    ENDPOINT_STOP_GRACE_PERIOD,
    DeviceAllocationError,
    plugin_call,
)
from pykubelet.cm.devicemanager.plugin_handler import DevicePluginHandler
from pykubelet.cm.devicemanager.registry import PluginRegistry
from pykubelet.cm.devicemanager.server import DEVICE_PLUGIN_DIR
from pykubelet.cm.devicemanager.topology_hints import (
    container_device_request,
    pod_device_request,
    resource_hints,
)
from pykubelet.cm.topologymanager.policy import ProviderHints
from pykubelet.container.devices import NO_DEVICES, DeviceRunOptions
from pykubelet.cri import RuntimeService
from pykubelet.util import klog

# How often ``run`` checks that kubelet.sock is still there and whether a stopped
# plugin's grace period has run out.
HOUSEKEEPING_PERIOD = 5.0


class ContainerDevices(NamedTuple):
    """A device of a resource on one NUMA node (no node: the device has no topology),
    for the pod-resources API: a device on two nodes is two entries, as upstream."""

    resource: str
    device_ids: list[str]
    numa_nodes: list[int]


def cri_running_containers(runtime: RuntimeService) -> RunningContainers:
    """The runtime's running containers by pod UID and container name (upstream builds
    the same from ``ListContainers`` when the container manager starts)."""

    async def running() -> set[tuple[str, str]]:
        containers = await runtime.list_containers(api_pb2.ContainerFilter(
            state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING)))
        return {(c.labels.get(POD_UID_LABEL, ""), c.labels.get(CONTAINER_NAME_LABEL, ""))
                for c in containers}
    return running


def _per_numa_node(resource: str, device_id: str,
                   nodes: Sequence[int]) -> list[ContainerDevices]:
    if not nodes:
        return [ContainerDevices(resource, [device_id], [])]
    return [ContainerDevices(resource, [device_id], [node]) for node in sorted(set(nodes))]


class DeviceManager:
    def __init__(self, *, active_pods: Callable[[], list[V1Pod]],
                 sources_ready: Callable[[], bool],
                 numa_nodes: Sequence[int],
                 running_containers: RunningContainers | None = None,
                 affinity: AffinityLookup | None = None,
                 plugin_dir: str = DEVICE_PLUGIN_DIR,  # another directory: tests only
                 grace_period: float = ENDPOINT_STOP_GRACE_PERIOD,  # tests only
                 clock: Callable[[], float] = time.monotonic,  # tests only
                 housekeeping_period: float = HOUSEKEEPING_PERIOD,  # tests only
                 ) -> None:
        self.plugin_dir = plugin_dir
        self.checkpoint_path = os.path.join(plugin_dir, CHECKPOINT_NAME)
        self._active_pods = active_pods
        self._numa_nodes = list(numa_nodes)
        self._housekeeping_period = housekeeping_period
        self._registry = PluginRegistry(plugin_dir=plugin_dir, changed=self._write_checkpoint,
                                        grace_period=grace_period, clock=clock)
        self._allocator = DeviceAllocator(
            registry=self._registry, active_pods=active_pods, sources_ready=sources_ready,
            running_containers=running_containers, affinity=affinity,
            changed=self._write_checkpoint)
        self.server = self._registry.server
        # What the plugin manager hands the plugins of type DevicePlugin it finds.
        self.plugin_handler = DevicePluginHandler(self._registry)

    # -- start and run ----------------------------------------------------------------------

    async def start(self) -> None:
        """Restore the checkpoint (before any pod is admitted) and note which containers
        the runtime runs; a bad checkpoint is logged and ignored, as upstream."""
        klog.info("Starting Device Plugin manager", directory=self.plugin_dir)
        try:
            data = await asyncio.to_thread(checkpoint.read, self.checkpoint_path)
        except CheckpointError as err:
            klog.error("Continue after failing to read checkpoint file. Device allocation "
                       "info may NOT be up-to-date", err)
            data = None
        if data is not None:
            self._allocator.restore(data.entries)
            self._registry.restore(data.registered)
            klog.v(4).info("Read data from checkpoint file", checkpoint=self.checkpoint_path)
        await self._allocator.note_running_containers()

    async def run(self) -> None:
        """Serve ``kubelet.sock`` until cancelled, with a housekeeping pass every period."""
        await self.server.start()
        try:
            while True:
                await asyncio.sleep(self._housekeeping_period)
                await self.housekeeping()
        finally:
            await self.stop()

    async def housekeeping(self) -> None:
        """Recreate ``kubelet.sock`` if it was removed; delete the resources of plugins
        stopped past the grace period (the checkpoint forgets them, the node status
        zeroes them)."""
        if self.server.socket_lost():
            klog.info("Device plugin registration socket was removed, recreating it",
                      socket=self.server.socket_path)
            await self.server.stop()
            await self.server.start()
        self._registry.expire_stopped()

    async def stop(self) -> None:
        await self._registry.stop()

    # -- the node ------------------------------------------------------------------------

    def get_capacity(self) -> tuple[dict[str, int], dict[str, int], list[str]]:
        """Capacity (all devices) and allocatable (healthy ones) per resource, and the
        resources deleted by housekeeping, until their plugins register again (the node
        status sets those to 0). A read: it changes nothing."""
        return self._registry.capacity()

    def allocatable(self) -> dict[str, int]:
        """The healthy devices per resource (admission's view)."""
        return self._registry.allocatable()

    def sanitize_node_allocatable(self, node: V1Node) -> V1Node:
        """The Node with each resource's allocatable raised to what is already allocated
        (upstream ``sanitizeNodeAllocatable``), so pods holding devices pass the
        predicates while their plugin is away. A copy; ``node`` is left alone."""
        status = node.status or V1NodeStatus()
        allocatable = dict(status.allocatable or {})
        changed = False
        for resource, ids in self._allocator.allocated.items():
            have = allocatable.get(resource)
            if have is not None and int(parse_quantity(have)) >= len(ids):
                continue
            allocatable[resource] = str(len(ids))
            changed = True
        if not changed:
            return node
        sanitized = clone(node)
        if sanitized.status is None:
            sanitized.status = V1NodeStatus()
        sanitized.status.allocatable = allocatable
        return sanitized

    # -- admission -------------------------------------------------------------------------

    async def allocate(self, pod: V1Pod, container: V1Container) -> None:
        """The container's devices (see ``allocator``); raises ``DeviceAllocationError``."""
        await self._allocator.allocate(pod, container)

    async def update_allocated_devices(self, admitting: str | None = None) -> None:
        """Free the devices of pods that are gone (see ``allocator``)."""
        await self._allocator.update_allocated_devices(admitting)

    async def prepare_for_admission(self, pod: V1Pod) -> None:
        """Before the topology manager asks for hints: free what gone pods hold, so a
        finished pod's devices are offered again (upstream does this at the start of
        ``GetTopologyHints``)."""
        await self._allocator.update_allocated_devices(admitting=pod_uid(pod))

    def get_topology_hints(self, pod: V1Pod, container: V1Container) -> ProviderHints:
        uid, name = pod_uid(pod), container.name or ""
        pod_devices = self._allocator.pod_devices
        return self._hints(
            container_device_request(container),
            held=lambda resource: pod_devices.container_devices(uid, name, resource) or set(),
            reusable=self._allocator.devices_to_reuse.get(uid, {}))

    def get_pod_topology_hints(self, pod: V1Pod) -> ProviderHints:
        """Hints for what the whole pod holds at once (``topology_hints.pod_device_request``)."""
        uid = pod_uid(pod)
        pod_devices = self._allocator.pod_devices
        return self._hints(pod_device_request(pod),
                           held=lambda resource: pod_devices.pod_devices(uid, resource),
                           reusable={})

    def _hints(self, requests: Mapping[str, int], *, held: Callable[[str], Set[str]],
               reusable: Mapping[str, set[str]]) -> ProviderHints:
        """Per device resource requested, its hints; None when no device resource is."""
        wanted = {resource: count for resource, count in requests.items()
                  if count > 0 and self._allocator.is_device_plugin_resource(resource)}
        if not wanted:
            return None
        allocated = self._allocator.allocated
        return {resource: resource_hints(
                    devices=self._registry.topology(resource), held=held(resource),
                    available=((self._registry.healthy(resource) or set())
                               - allocated.get(resource, set())),
                    reusable=reusable.get(resource, set()), request=count,
                    numa_nodes=self._numa_nodes)
                for resource, count in wanted.items()}

    # -- containers --------------------------------------------------------------------------

    async def device_run_options(self, pod: V1Pod, container: V1Container) -> DeviceRunOptions:
        """What the container is created with for its devices (upstream
        ``GetDeviceRunContainerOptions``): ``PreStartContainer`` first where the plugin
        asked for it; a container of an active pod with no devices on record (a node
        reboot raced its plugin) is allocated again. Raises ``DeviceAllocationError``."""
        uid, name = pod_uid(pod), container.name or ""
        pod_devices = self._allocator.pod_devices
        reallocate = False
        for resource, count in container_device_request(container).items():
            if not self._allocator.is_device_plugin_resource(resource) or count == 0:
                continue
            await self._pre_start_if_needed(uid, name, resource)
            if uid not in {pod_uid(p) for p in self._active_pods()}:
                continue
            if pod_devices.container_devices(uid, name, resource) is None:
                reallocate = True
        if reallocate:
            klog.info("Needs to re-allocate device plugin resources for pod", podUID=uid,
                      containerName=name)
            await self.allocate(pod, container)
        return pod_devices.run_options(uid, name) or NO_DEVICES

    async def _pre_start_if_needed(self, uid: str, name: str, resource: str) -> None:
        endpoint = self._registry.endpoint(resource)
        if endpoint is None:
            raise DeviceAllocationError(
                f"endpoint not found in cache for a registered resource: {resource}")
        if not endpoint.options.pre_start_required:
            return
        devices = self._allocator.pod_devices.container_devices(uid, name, resource)
        if devices is None:
            raise DeviceAllocationError(
                f"no devices found allocated in local cache for pod {uid}, container {name}, "
                f"resource {resource}")
        klog.v(4).info("Issuing a PreStartContainer call for container", containerName=name,
                       podUID=uid)
        await plugin_call("PreStartContainer", endpoint.pre_start_container(sorted(devices)))

    # -- the pod-resources API -------------------------------------------------------------

    def get_devices(self, pod_uid: str, container_name: str) -> list[ContainerDevices]:
        """The devices the container holds, one entry per device and NUMA node."""
        found = []
        allocations = self._allocator.pod_devices.container_allocations(pod_uid,
                                                                        container_name)
        for resource, allocation in sorted(allocations.items()):
            for device_id in sorted(allocation.ids()):
                nodes = [node for node, ids in allocation.by_numa.items()
                         if device_id in ids and node != NODE_WITHOUT_TOPOLOGY]
                found.extend(_per_numa_node(resource, device_id, nodes))
        return found

    def get_allocatable_devices(self) -> list[ContainerDevices]:
        """Every healthy device the plugins report, one entry per device and NUMA node."""
        found = []
        for resource, healthy in sorted(self._registry.healthy_devices().items()):
            topology = self._registry.topology(resource)
            for device_id in sorted(healthy):
                found.extend(_per_numa_node(resource, device_id, topology.get(device_id, ())))
        return found

    # -- the checkpoint --------------------------------------------------------------------

    def _write_checkpoint(self) -> None:
        data = CheckpointData(self._allocator.pod_devices.to_checkpoint(),
                              {resource: sorted(ids) for resource, ids
                               in self._registry.healthy_devices().items()})
        try:
            checkpoint.write(self.checkpoint_path, data)
        except OSError as err:
            klog.error("Failed to write checkpoint file", err, checkpoint=self.checkpoint_path)


__all__ = ["ContainerDevices", "DeviceAllocationError",
           "DeviceManager", "cri_running_containers"]
