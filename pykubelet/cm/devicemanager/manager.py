"""The device plugin manager (upstream ``devicemanager/manager.go`` and ``topology_hints.go``).

- Registration: plugins register on ``kubelet.sock`` (``server.py``); the manager
  dials each, follows its ``ListAndWatch`` in a task of its own, and keeps per
  resource the healthy and unhealthy device ids. A plugin registering again
  replaces its old endpoint.
- The node: capacity is every device, allocatable the healthy ones
  (``get_capacity``). A plugin whose stream ends has all its devices marked
  unhealthy at once (allocatable 0, capacity unchanged); once its endpoint has
  been stopped for the grace period (5 minutes) the resource is deleted and the
  node status sets its capacity to 0, as upstream.
- Admission: ``allocate`` picks a container's devices (those an init container of
  the pod held first, then the topology manager's NUMA affinity, then the
  plugin's ``GetPreferredAllocation`` when it offers one, then any healthy free
  device), calls the plugin's ``Allocate`` and keeps its answer; any failure is
  raised, and the admit handler turns it into ``UnexpectedAdmissionError``.
- Containers: ``device_run_options`` is what a container is created with (the
  merged ``Allocate`` answers), after ``PreStartContainer`` when the plugin asks.
- The checkpoint (``checkpoint.py``) is written on every change and read on
  start, so a restart neither loses nor hands out twice a device in use; the
  resources it names wait with no devices until their plugins register again.

Every method runs on the event loop; allocations are serialized by one lock
because they await the plugins between choosing devices and recording them.

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
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, TypeVar

import grpc
import grpc.aio
from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Node, V1NodeStatus, V1Pod

from pykubelet import metrics
from pykubelet.api import clone
from pykubelet.api.kubetypes import CONTAINER_NAME_LABEL, POD_UID_LABEL
from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.api.quantity import parse_quantity
from pykubelet.cm.devicemanager import checkpoint
from pykubelet.cm.devicemanager.checkpoint import (
    CHECKPOINT_NAME,
    NODE_WITHOUT_TOPOLOGY,
    CheckpointData,
    CheckpointError,
)
from pykubelet.cm.devicemanager.endpoint import (
    ENDPOINT_STOP_GRACE_PERIOD,
    Endpoint,
    EndpointStoppedError,
)
from pykubelet.cm.devicemanager.pod_devices import PodDevices
from pykubelet.cm.devicemanager.server import DEVICE_PLUGIN_DIR, RegistrationServer
from pykubelet.cm.topologymanager.bitmask import BitMask, iterate_bit_masks
from pykubelet.cm.topologymanager.policy import ProviderHints, TopologyHint
from pykubelet.container.devices import NO_DEVICES, DeviceRunOptions
from pykubelet.cri import RuntimeService
from pykubelet.util import klog

HEALTHY = "Healthy"
# How often ``run`` checks that kubelet.sock is still there and whether a stopped
# plugin's grace period has run out.
HOUSEKEEPING_PERIOD = 5.0


class DeviceAllocationError(Exception):
    """A container's devices cannot be allocated (or readied); the message is upstream's."""


class ContainerDevices(NamedTuple):
    """One device of a resource and the NUMA nodes it sits on (empty: no topology), for
    the pod-resources API."""

    resource: str
    device_ids: list[str]
    numa_nodes: list[int]


# (pod UID, container name) pairs the runtime reports running.
RunningContainers = Callable[[], Awaitable[set[tuple[str, str]]]]
# The topology manager's stored hint for (pod UID, container name).
AffinityLookup = Callable[[str, str], TopologyHint]


def cri_running_containers(runtime: RuntimeService) -> RunningContainers:
    """The runtime's running containers by pod UID and container name (upstream builds
    the same from ``ListContainers`` when the container manager starts)."""

    async def running() -> set[tuple[str, str]]:
        containers = await runtime.list_containers(api_pb2.ContainerFilter(
            state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING)))
        return {(c.labels.get(POD_UID_LABEL, ""), c.labels.get(CONTAINER_NAME_LABEL, ""))
                for c in containers}
    return running


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _rpc_error_text(err: grpc.aio.AioRpcError) -> str:
    """A gRPC error as Go's client prints it."""
    code = "".join(word.capitalize() for word in err.code().name.split("_"))
    return f"rpc error: code = {code} desc = {err.details()}"


_Answer = TypeVar("_Answer")


async def _plugin_call(rpc: str, call: Awaitable[_Answer]) -> _Answer:
    """A plugin's answer, or ``DeviceAllocationError`` in upstream's words for that RPC."""
    try:
        return await call
    except grpc.aio.AioRpcError as err:
        raise DeviceAllocationError(
            f"device plugin {rpc} rpc failed with err: {_rpc_error_text(err)}") from err
    except EndpointStoppedError as err:
        raise DeviceAllocationError(f"device plugin {rpc} rpc failed with err: {err}") from err


def _uid(pod: V1Pod) -> str:
    return (pod.metadata.uid if pod.metadata is not None else None) or ""


def _device_limits(container: V1Container) -> dict[str, int]:
    """The container's limits as whole numbers: extended resources cannot be overcommitted,
    so requests equal limits and upstream reads the limits only."""
    limits = (container.resources.limits if container.resources is not None else None) or {}
    return {name: int(parse_quantity(value)) for name, value in limits.items()}


def _numa_nodes(device: pluginapi.Device | None) -> list[int]:
    if device is None or not device.HasField("topology"):
        return []
    return [int(node.ID) for node in device.topology.nodes]


class DeviceManager:
    def __init__(self, *, active_pods: Callable[[], list[V1Pod]],
                 sources_ready: Callable[[], bool],
                 running_containers: RunningContainers | None = None,
                 affinity: AffinityLookup | None = None,
                 numa_nodes: Sequence[int] = (0,),
                 plugin_dir: str = DEVICE_PLUGIN_DIR,  # another directory: tests only
                 grace_period: float = ENDPOINT_STOP_GRACE_PERIOD,  # tests only
                 clock: Callable[[], float] = time.monotonic,  # tests only
                 housekeeping_period: float = HOUSEKEEPING_PERIOD,  # tests only
                 ) -> None:
        self.plugin_dir = plugin_dir
        self.checkpoint_path = os.path.join(plugin_dir, CHECKPOINT_NAME)
        self._active_pods = active_pods
        self._sources_ready = sources_ready
        self._running_containers = running_containers
        self._affinity = affinity
        self._numa_nodes = list(numa_nodes)
        self._grace_period = grace_period
        self._clock = clock
        self._housekeeping_period = housekeeping_period
        self.server = RegistrationServer(plugin_dir, self._connect, keep=CHECKPOINT_NAME)

        self._endpoints: dict[str, Endpoint] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._all_devices: dict[str, dict[str, pluginapi.Device]] = {}
        self._healthy: dict[str, set[str]] = {}
        self._unhealthy: dict[str, set[str]] = {}
        self._allocated: dict[str, set[str]] = {}
        self._pod_devices = PodDevices()
        # Pod UID -> resource -> devices its init containers held, for its next containers.
        self._devices_to_reuse: dict[str, dict[str, set[str]]] = {}
        self._initially_running: set[tuple[str, str]] = set()
        self._lock = asyncio.Lock()
        self._listeners: list[Callable[[], None]] = []
        # Stopped endpoints whose expiry was already announced.
        self._expiry_announced: set[int] = set()

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
            self._restore(data)
        if self._running_containers is not None:
            try:
                self._initially_running = await self._running_containers()
            except Exception as err:  # only a restart's shortcut depends on it
                klog.error("Cannot list the running containers", err)

    def _restore(self, data: CheckpointData) -> None:
        self._pod_devices.from_checkpoint(data.entries)
        self._allocated = self._pod_devices.devices()
        for resource in data.registered:
            # No devices until the plugin registers again; the endpoint is stopped, so
            # the resource goes away if it does not within the grace period.
            self._healthy[resource] = set()
            self._unhealthy[resource] = set()
            self._endpoints[resource] = Endpoint(resource, None, clock=self._clock)
        klog.v(4).info("Read data from checkpoint file", checkpoint=self.checkpoint_path)

    async def run(self) -> None:
        """Serve ``kubelet.sock`` until cancelled; recreate it if it is removed, and
        announce a resource whose grace period ran out."""
        await self.server.start()
        try:
            while True:
                await asyncio.sleep(self._housekeeping_period)
                if self.server.socket_lost():
                    klog.info("Device plugin registration socket was removed, recreating it",
                              socket=self.server.socket_path)
                    await self.server.stop()
                    await self.server.start()
                self._announce_expired()
        finally:
            await self.stop()

    async def stop(self) -> None:
        for task in list(self._watchers.values()):
            task.cancel()
        for task in list(self._watchers.values()):
            # Cancelled, or its end already logged.
            with contextlib.suppress(BaseException):
                await task
        self._watchers.clear()
        for endpoint in list(self._endpoints.values()):
            await endpoint.close()
        await self.server.stop()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` is called after the devices (hence capacity) may have changed."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception as err:  # a listener must not stop the device updates
                klog.error("Device change listener failed", err)

    def _announce_expired(self) -> None:
        for endpoint in self._endpoints.values():
            if (endpoint.stop_grace_period_expired(self._grace_period)
                    and id(endpoint) not in self._expiry_announced):
                self._expiry_announced.add(id(endpoint))
                self._notify()

    # -- plugins -----------------------------------------------------------------------------

    async def _connect(self, resource: str, socket_path: str) -> None:
        """A plugin registered: dial it, read its options, follow its devices."""
        endpoint = Endpoint(resource, socket_path, clock=self._clock)
        try:
            await endpoint.connect()
        except BaseException:
            await endpoint.close()
            raise
        old = self._endpoints.get(resource)
        self._endpoints[resource] = endpoint
        old_watcher = self._watchers.pop(resource, None)
        if old_watcher is not None:
            old_watcher.cancel()
        if old is not None:
            await old.close()
        self._watchers[resource] = asyncio.create_task(
            self._watch(endpoint), name=f"device-plugin-list-and-watch:{resource}")
        klog.info("Device plugin connected", resourceName=resource, endpoint=socket_path,
                  preStartRequired=endpoint.options.pre_start_required,
                  getPreferredAllocationAvailable=(
                      endpoint.options.get_preferred_allocation_available))

    async def _watch(self, endpoint: Endpoint) -> None:
        resource = endpoint.resource
        try:
            async for response in endpoint.list_and_watch():
                self._update_devices(resource, response.devices)
            klog.error("ListAndWatch ended for device plugin", resourceName=resource)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as err:
            klog.error("listAndWatch ended unexpectedly for device plugin",
                       _rpc_error_text(err), resourceName=resource)
        except Exception as err:  # any end of the stream is the plugin gone
            klog.error("listAndWatch ended unexpectedly for device plugin", err,
                       resourceName=resource)
        self._disconnected(endpoint)

    def _disconnected(self, endpoint: Endpoint) -> None:
        resource = endpoint.resource
        if self._endpoints.get(resource) is not endpoint:
            return
        self._watchers.pop(resource, None)
        # Every device unhealthy at once: the node's allocatable drops to 0.
        self._unhealthy.setdefault(resource, set()).update(self._healthy.get(resource, set()))
        self._healthy[resource] = set()
        endpoint.set_stopped()
        klog.info("Endpoint became unhealthy", resourceName=resource, endpoint=endpoint)
        self._write_checkpoint()
        self._notify()

    def _update_devices(self, resource: str,
                        devices: Sequence[pluginapi.Device]) -> None:
        self._all_devices[resource] = {d.ID: d for d in devices}
        self._healthy[resource] = {d.ID for d in devices if d.health == HEALTHY}
        self._unhealthy[resource] = {d.ID for d in devices if d.health != HEALTHY}
        klog.v(2).info("Processed device updates for resource", resourceName=resource,
                       totalCount=len(devices), healthyCount=len(self._healthy[resource]))
        self._write_checkpoint()
        self._notify()

    # -- the node ------------------------------------------------------------------------

    def get_capacity(self) -> tuple[dict[str, int], dict[str, int], list[str]]:
        """Capacity (all devices) and allocatable (healthy ones) per resource, and the
        resources just deleted because their plugin stayed away past the grace period
        (the node status sets those to 0; each is reported once)."""
        capacity: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        deleted: set[str] = set()
        for resource in sorted(set(self._healthy) | set(self._unhealthy)):
            endpoint = self._endpoints.get(resource)
            if endpoint is None or endpoint.stop_grace_period_expired(self._grace_period):
                self._endpoints.pop(resource, None)
                self._healthy.pop(resource, None)
                self._unhealthy.pop(resource, None)
                deleted.add(resource)
                continue
            healthy = len(self._healthy.get(resource, ()))
            capacity[resource] = healthy + len(self._unhealthy.get(resource, ()))
            allocatable[resource] = healthy
        if deleted:
            self._write_checkpoint()
        return capacity, allocatable, sorted(deleted)

    def allocatable(self) -> dict[str, int]:
        """The healthy devices per resource, without deleting anything (admission's view)."""
        return {resource: len(ids) for resource, ids in self._healthy.items()}

    def sanitize_node_allocatable(self, node: V1Node) -> V1Node:
        """The Node with each resource's allocatable raised to what is already allocated
        (upstream ``sanitizeNodeAllocatable``), so pods holding devices pass the
        predicates while their plugin is away. A copy; ``node`` is left alone."""
        status = node.status or V1NodeStatus()
        allocatable = dict(status.allocatable or {})
        changed = False
        for resource, ids in self._allocated.items():
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

    # -- allocation ------------------------------------------------------------------------

    def _is_device_plugin_resource(self, resource: str) -> bool:
        return resource in self._healthy or resource in self._allocated

    async def allocate(self, pod: V1Pod, container: V1Container) -> None:
        """Upstream ``Allocate``: the container's devices, reusing what the pod's init
        containers held (init containers run before, never beside, the app containers;
        a restartable init container keeps its devices). Raises on failure."""
        uid = _uid(pod)
        async with self._lock:
            # Only the pod being admitted keeps reusable devices.
            reusable = self._devices_to_reuse.setdefault(uid, {})
            for other in [u for u in self._devices_to_reuse if u != uid]:
                del self._devices_to_reuse[other]
            await self._allocate_container_resources(pod, container, reusable)
            init = next((c for c in (pod.spec.init_containers or [])
                         if c.name == container.name), None) if pod.spec is not None else None
            name = container.name or ""
            if init is not None and init.restart_policy != "Always":
                self._pod_devices.add_container_allocated(uid, name, reusable)
            else:
                self._pod_devices.remove_container_allocated(uid, name, reusable)

    async def update_allocated_devices(self, admitting: str | None = None) -> None:
        """Free the devices of pods no longer active (once every source is ready, so that
        a restart does not free what live pods hold); ``admitting`` counts as active, and
        so does a pod whose containers the runtime still runs: a device in use is never
        handed out twice, whatever order a restarted kubelet admits its pods in."""
        active = {_uid(p) for p in self._active_pods()}
        if not self._sources_ready():
            return
        if admitting is not None:
            active.add(admitting)
        gone = self._pod_devices.pods() - active
        if gone and self._running_containers is not None:
            try:
                gone -= {uid for uid, _ in await self._running_containers()}
            except Exception as err:  # unsure what runs: free nothing now
                klog.error("Cannot list the running containers", err)
                return
        if not gone:
            return
        klog.v(3).info("Pods to be removed", podUIDs=sorted(gone))
        self._pod_devices.delete(gone)
        self._allocated = self._pod_devices.devices()
        self._write_checkpoint()

    async def _allocate_container_resources(self, pod: V1Pod, container: V1Container,
                                            reusable: dict[str, set[str]]) -> None:
        uid, name = _uid(pod), container.name or ""
        updated = False
        needs_checkpoint = False
        try:
            for resource, needed in _device_limits(container).items():
                if not self._is_device_plugin_resource(resource):
                    continue
                if not updated:
                    await self.update_allocated_devices(admitting=uid)
                    updated = True
                try:
                    devices = await self._devices_to_allocate(uid, name, resource, needed,
                                                              reusable.get(resource, set()))
                except DeviceAllocationError:
                    # What was taken before the failure goes back.
                    self._allocated = self._pod_devices.devices()
                    raise
                if not devices:
                    continue
                needs_checkpoint = True
                endpoint = self._endpoints.get(resource)
                if endpoint is None:
                    self._allocated = self._pod_devices.devices()
                    raise DeviceAllocationError(f"unknown Device Plugin {resource}")
                ids = sorted(devices)
                klog.v(4).info("Making allocation request for device plugin", devices=ids,
                               resourceName=resource, podUID=uid, containerName=name)
                started = time.monotonic()
                try:
                    response = await endpoint.allocate(ids)
                except grpc.aio.AioRpcError as err:
                    self._allocated = self._pod_devices.devices()
                    raise DeviceAllocationError(_rpc_error_text(err)) from err
                except EndpointStoppedError as err:
                    self._allocated = self._pod_devices.devices()
                    raise DeviceAllocationError(str(err)) from err
                finally:
                    metrics.DEVICE_PLUGIN_ALLOC_DURATION.labels(resource).observe(
                        time.monotonic() - started)
                if not response.container_responses:
                    self._allocated = self._pod_devices.devices()
                    raise DeviceAllocationError(
                        f"no containers return in allocation response {response}")
                by_numa: dict[int, list[str]] = {}
                for device_id in ids:
                    nodes = _numa_nodes(self._all_devices.get(resource, {}).get(device_id))
                    for node in nodes or [NODE_WITHOUT_TOPOLOGY]:
                        by_numa.setdefault(node, []).append(device_id)
                self._pod_devices.insert(uid, name, resource, by_numa,
                                         response.container_responses[0])
        finally:
            if needs_checkpoint:
                self._write_checkpoint()

    async def _devices_to_allocate(self, uid: str, name: str, resource: str, required: int,
                                   reusable: set[str]) -> set[str]:
        """Upstream ``devicesToAllocate``: the new devices to ask the plugin for (empty
        when the container already holds them)."""
        needed = required
        held = self._pod_devices.container_devices(uid, name, resource)
        if held is not None:
            klog.v(3).info("Found pre-allocated devices for resource on pod",
                           resourceName=resource, containerName=name, podUID=uid,
                           devices=sorted(held))
            needed -= len(held)
            if needed != 0:
                raise DeviceAllocationError(
                    f"pod {_go_quote(uid)} container {_go_quote(name)} changed request for "
                    f"resource {_go_quote(resource)} from {len(held)} to {required}")
            if (uid, name) in self._initially_running:
                # Running since before this kubelet started: it has its devices already.
                return set()
        healthy = self._healthy.get(resource)
        if healthy is None:
            raise DeviceAllocationError(f"cannot allocate unregistered device {resource}")
        if not healthy:
            raise DeviceAllocationError(
                f"no healthy devices present; cannot allocate unhealthy devices {resource}")
        if held is not None and not held <= healthy:
            raise DeviceAllocationError(
                "previously allocated devices are no longer healthy; cannot allocate "
                f"unhealthy devices {resource}")
        if needed == 0:
            return set()

        allocated: set[str] = set()
        in_use = self._allocated.setdefault(resource, set())

        def take_from(candidates: set[str]) -> bool:
            """Take candidates until enough; True once nothing more is needed."""
            nonlocal needed
            for device in sorted(candidates - allocated):
                self._allocated.setdefault(resource, set()).add(device)
                allocated.add(device)
                needed -= 1
                if needed == 0:
                    return True
            return False

        if take_from(reusable):
            return allocated
        available = healthy - in_use
        if len(available) < needed:
            raise DeviceAllocationError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {needed}, Available: {len(available)}")
        aligned, unaligned, no_affinity = self._filter_by_affinity(uid, name, resource,
                                                                   available)
        if needed < len(aligned):
            preferred = await self._preferred_allocation(resource, aligned | allocated,
                                                         allocated, required)
            if take_from(preferred & aligned) or take_from(aligned):
                return allocated
        else:
            if take_from(aligned):
                return allocated
            preferred = await self._preferred_allocation(resource, available | allocated,
                                                         allocated, required)
            if (take_from(preferred & available) or take_from(unaligned)
                    or take_from(no_affinity)):
                return allocated
        raise DeviceAllocationError(
            "unexpectedly allocated less resources than required. "
            f"Requested: {required}, Got: {required - needed}")

    async def _preferred_allocation(self, resource: str, available: set[str],
                                    must_include: set[str], size: int) -> set[str]:
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise DeviceAllocationError(
                f"endpoint not found in cache for a registered resource: {resource}")
        if not endpoint.options.get_preferred_allocation_available:
            return set()
        response = await _plugin_call("GetPreferredAllocation", endpoint.get_preferred_allocation(
            sorted(available), sorted(must_include), size))
        if response.container_responses:
            return set(response.container_responses[0].deviceIDs)
        return set()

    def _has_topology(self, resource: str) -> bool:
        return any(_numa_nodes(d) for d in self._all_devices.get(resource, {}).values())

    def _filter_by_affinity(self, uid: str, name: str, resource: str,
                            available: set[str]) -> tuple[set[str], set[str], set[str]]:
        """Available devices on the container's NUMA affinity, on other nodes, and
        without topology (upstream ``filterByAffinity``)."""
        hint = self._affinity(uid, name) if self._affinity is not None else None
        if hint is None or hint.affinity is None or not self._has_topology(resource):
            return set(), set(), set(available)
        aligned, unaligned, no_affinity = set(), set(), set()
        for device in available:
            nodes = _numa_nodes(self._all_devices.get(resource, {}).get(device))
            if not nodes:
                no_affinity.add(device)
            elif any(hint.affinity.is_set(node) for node in nodes):
                aligned.add(device)
            else:
                unaligned.add(device)
        return aligned, unaligned, no_affinity

    # -- topology hints (upstream topology_hints.go) -----------------------------------------

    def get_topology_hints(self, pod: V1Pod, container: V1Container) -> ProviderHints:
        uid = _uid(pod)
        return self._hints(uid, _device_limits(container), [container.name or ""],
                           reusable=self._devices_to_reuse.get(uid, {}))

    def get_pod_topology_hints(self, pod: V1Pod) -> ProviderHints:
        """Hints for what the whole pod holds at once: the largest init container's
        request or the app containers' sum, whichever is larger (upstream
        ``getPodDeviceRequest``)."""
        spec = pod.spec
        inits = (spec.init_containers or []) if spec is not None else []
        apps = (spec.containers or []) if spec is not None else []
        requests: dict[str, int] = {}
        for container in apps:
            for resource, count in _device_limits(container).items():
                requests[resource] = requests.get(resource, 0) + count
        for container in inits:
            for resource, count in _device_limits(container).items():
                requests[resource] = max(requests.get(resource, 0), count)
        return self._hints(_uid(pod), requests,
                           [c.name or "" for c in [*inits, *apps]], reusable={})

    def _hints(self, uid: str, requests: dict[str, int], containers: Sequence[str], *,
               reusable: dict[str, set[str]]) -> ProviderHints:
        """Per device resource requested: None when its devices have no topology, [] when
        it cannot be met, else the NUMA masks it can be met from. (Upstream frees gone
        pods' devices first; here ``allocate`` does, which may ask the runtime.)"""
        wanted = {r: n for r, n in requests.items()
                  if n > 0 and self._is_device_plugin_resource(r)}
        if not wanted:
            return None
        hints: dict[str, list[TopologyHint] | None] = {}
        for resource, request in wanted.items():
            if not self._has_topology(resource):
                hints[resource] = None
                continue
            held: set[str] = set()
            for name in containers:
                held |= self._pod_devices.container_devices(uid, name, resource) or set()
            if held:
                # Regenerate the hints of what is already held (a restart's re-admission).
                hints[resource] = ([] if len(held) != request
                                   else self._device_hints(resource, held, set(), request))
                continue
            available = (self._healthy.get(resource, set())
                         - self._allocated.get(resource, set()))
            own = reusable.get(resource, set())
            if len(available | own) < request:
                hints[resource] = []
                continue
            hints[resource] = self._device_hints(resource, available, own, request)
        return hints

    def _device_hints(self, resource: str, available: set[str], reusable: set[str],
                      request: int) -> list[TopologyHint]:
        devices = self._all_devices.get(resource, {})
        min_affinity = len(self._numa_nodes)
        found: list[BitMask] = []
        for mask in iterate_bit_masks(self._numa_nodes):
            def on_mask(device_id: str, mask: BitMask = mask) -> bool:
                return any(mask.is_set(n) for n in _numa_nodes(devices.get(device_id)))
            if sum(1 for d in devices if on_mask(d)) >= request:
                min_affinity = min(min_affinity, mask.count())
            matching = 0
            off_mask = False
            for device_id in reusable:
                if not _numa_nodes(devices.get(device_id)):
                    continue
                if not on_mask(device_id):
                    off_mask = True
                    break
                matching += 1
            if off_mask:
                continue
            matching += sum(1 for d in available if on_mask(d))
            if matching >= request:
                found.append(mask)
        return [TopologyHint(mask, mask.count() == min_affinity) for mask in found]

    # -- containers --------------------------------------------------------------------------

    async def device_run_options(self, pod: V1Pod, container: V1Container) -> DeviceRunOptions:
        """What the container is created with for its devices (upstream
        ``GetDeviceRunContainerOptions``): ``PreStartContainer`` first where the plugin
        asked for it; a container of an active pod with no devices on record (a node
        reboot raced its plugin) is allocated again. Raises ``DeviceAllocationError``."""
        uid, name = _uid(pod), container.name or ""
        reallocate = False
        for resource, count in _device_limits(container).items():
            if not self._is_device_plugin_resource(resource) or count == 0:
                continue
            await self._pre_start_if_needed(uid, name, resource)
            if uid not in {_uid(p) for p in self._active_pods()}:
                continue
            if self._pod_devices.container_devices(uid, name, resource) is None:
                reallocate = True
        if reallocate:
            klog.info("Needs to re-allocate device plugin resources for pod", podUID=uid,
                      containerName=name)
            await self.allocate(pod, container)
        return self._pod_devices.run_options(uid, name) or NO_DEVICES

    async def _pre_start_if_needed(self, uid: str, name: str, resource: str) -> None:
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise DeviceAllocationError(
                f"endpoint not found in cache for a registered resource: {resource}")
        if not endpoint.options.pre_start_required:
            return
        devices = self._pod_devices.container_devices(uid, name, resource)
        if devices is None:
            raise DeviceAllocationError(
                f"no devices found allocated in local cache for pod {uid}, container {name}, "
                f"resource {resource}")
        klog.v(4).info("Issuing a PreStartContainer call for container", containerName=name,
                       podUID=uid)
        await _plugin_call("PreStartContainer", endpoint.pre_start_container(sorted(devices)))

    # -- the pod-resources API -------------------------------------------------------------

    def get_devices(self, pod_uid: str, container_name: str) -> list[ContainerDevices]:
        """The devices the container holds, one entry per device."""
        found = []
        for resource, allocation in sorted(
                self._pod_devices.container_allocations(pod_uid, container_name).items()):
            for device_id in sorted(allocation.ids()):
                nodes = sorted(node for node, ids in allocation.by_numa.items()
                               if device_id in ids and node != NODE_WITHOUT_TOPOLOGY)
                found.append(ContainerDevices(resource, [device_id], nodes))
        return found

    def get_allocatable_devices(self) -> list[ContainerDevices]:
        """Every healthy device the plugins report, one entry per device."""
        found = []
        for resource, healthy in sorted(self._healthy.items()):
            devices = self._all_devices.get(resource, {})
            for device_id in sorted(healthy):
                found.append(ContainerDevices(resource, [device_id],
                                              sorted(_numa_nodes(devices.get(device_id)))))
        return found

    # -- the checkpoint --------------------------------------------------------------------

    def _write_checkpoint(self) -> None:
        data = CheckpointData(self._pod_devices.to_checkpoint(),
                              {resource: sorted(ids) for resource, ids in self._healthy.items()})
        try:
            checkpoint.write(self.checkpoint_path, data)
        except OSError as err:
            klog.error("Failed to write checkpoint file", err, checkpoint=self.checkpoint_path)


__all__ = ["HEALTHY", "ContainerDevices", "DeviceAllocationError",
           "DeviceManager", "cri_running_containers"]
