"""Which devices a container gets (upstream ``manager.go``'s ``Allocate``,
``devicesToAllocate``, ``filterByAffinity`` and ``UpdateAllocatedDevices``).

A container's devices are, in order: those it already holds (a restart's
re-admission), those an init container of its pod held (init containers run
before, never beside, the app containers; a sidecar keeps its devices), then the
free devices on the NUMA nodes the topology manager chose for it, with the
plugin's ``GetPreferredAllocation`` first when it offers one, then any other
healthy free device. The plugin's ``Allocate`` answer is kept in ``pod_devices``
(what the container is created with and what the checkpoint records). Any
failure is raised as ``DeviceAllocationError``, and what was taken goes back.

The devices of pods that are gone are freed by ``update_allocated_devices``,
before every allocation and before the topology manager asks for hints.

Allocations are serialized by one lock because they await the plugin between
choosing devices and recording them. ``changed`` is called after what the
checkpoint records (the containers' devices) changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import grpc.aio
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet import metrics
from pykubelet.api import is_restartable_init_container, pod_uid
from pykubelet.cm.devicemanager.checkpoint import NODE_WITHOUT_TOPOLOGY, PodDevicesEntry
from pykubelet.cm.devicemanager.endpoint import (
    DeviceAllocationError,
    EndpointStoppedError,
    plugin_call,
    rpc_error_text,
)
from pykubelet.cm.devicemanager.pod_devices import PodDevices
from pykubelet.cm.devicemanager.registry import PluginRegistry
from pykubelet.cm.devicemanager.topology_hints import container_device_request, has_topology
from pykubelet.cm.topologymanager.policy import TopologyHint
from pykubelet.util import klog
from pykubelet.util.gotext import go_quote

# (pod UID, container name) pairs the runtime reports running.
RunningContainers = Callable[[], Awaitable[set[tuple[str, str]]]]
# The topology manager's stored hint for (pod UID, container name).
AffinityLookup = Callable[[str, str], TopologyHint]


class DeviceAllocator:
    def __init__(self, *, registry: PluginRegistry, active_pods: Callable[[], list[V1Pod]],
                 sources_ready: Callable[[], bool], running_containers: RunningContainers | None,
                 affinity: AffinityLookup | None, changed: Callable[[], None]) -> None:
        self._registry = registry
        self._active_pods = active_pods
        self._sources_ready = sources_ready
        self._running_containers = running_containers
        self._affinity = affinity
        self._changed = changed
        self.pod_devices = PodDevices()
        # Resource -> devices some container holds or an allocation under way took.
        self.allocated: dict[str, set[str]] = {}
        # Pod UID -> resource -> devices its init containers held, for its next containers.
        self.devices_to_reuse: dict[str, dict[str, set[str]]] = {}
        self._initially_running: set[tuple[str, str]] = set()
        self._lock = asyncio.Lock()

    def restore(self, entries: list[PodDevicesEntry]) -> None:
        self.pod_devices.from_checkpoint(entries)
        self.allocated = self.pod_devices.devices()

    async def note_running_containers(self) -> None:
        """Remember what the runtime runs as the kubelet starts: those containers have
        their devices already."""
        if self._running_containers is None:
            return
        try:
            self._initially_running = await self._running_containers()
        except Exception as err:  # only a restart's shortcut depends on it
            klog.error("Cannot list the running containers", err)

    def is_device_plugin_resource(self, resource: str) -> bool:
        return self._registry.is_registered(resource) or resource in self.allocated

    def _forget_unrecorded(self) -> None:
        # What an allocation took but did not record goes back.
        self.allocated = self.pod_devices.devices()

    async def allocate(self, pod: V1Pod, container: V1Container) -> None:
        """Upstream ``Allocate``: the container's devices. Raises on failure."""
        uid = pod_uid(pod)
        async with self._lock:
            # Only the pod being admitted keeps reusable devices.
            reusable = self.devices_to_reuse.setdefault(uid, {})
            for other in [u for u in self.devices_to_reuse if u != uid]:
                del self.devices_to_reuse[other]
            await self._allocate_container_resources(pod, container, reusable)
            spec = pod.spec
            init = next((c for c in (spec.init_containers or []) if c.name == container.name),
                        None) if spec is not None else None
            name = container.name or ""
            if init is not None and not is_restartable_init_container(init):
                self.pod_devices.add_container_allocated(uid, name, reusable)
            else:
                self.pod_devices.remove_container_allocated(uid, name, reusable)

    async def update_allocated_devices(self, admitting: str | None = None) -> None:
        """Free the devices of pods no longer active (once every source is ready, so that
        a restart does not free what live pods hold); ``admitting`` counts as active, and
        so does a pod whose containers the runtime still runs: a device in use is never
        handed out twice, whatever order a restarted kubelet admits its pods in."""
        active = {pod_uid(p) for p in self._active_pods()}
        if not self._sources_ready():
            return
        if admitting is not None:
            active.add(admitting)
        gone = self.pod_devices.pods() - active
        if gone and self._running_containers is not None:
            try:
                gone -= {uid for uid, _ in await self._running_containers()}
            except Exception as err:  # unsure what runs: free nothing now
                klog.error("Cannot list the running containers", err)
                return
        if not gone:
            return
        klog.v(3).info("Pods to be removed", podUIDs=sorted(gone))
        self.pod_devices.delete(gone)
        self.allocated = self.pod_devices.devices()
        self._changed()

    async def _allocate_container_resources(self, pod: V1Pod, container: V1Container,
                                            reusable: dict[str, set[str]]) -> None:
        uid, name = pod_uid(pod), container.name or ""
        updated = False
        recorded = False
        try:
            for resource, needed in container_device_request(container).items():
                if not self.is_device_plugin_resource(resource):
                    continue
                if not updated:
                    await self.update_allocated_devices(admitting=uid)
                    updated = True
                try:
                    devices = await self._devices_to_allocate(uid, name, resource, needed,
                                                              reusable.get(resource, set()))
                    if devices:
                        await self._call_allocate(uid, name, resource, devices)
                        recorded = True
                except DeviceAllocationError:
                    self._forget_unrecorded()
                    raise
        finally:
            if recorded:
                self._changed()

    async def _call_allocate(self, uid: str, name: str, resource: str,
                             devices: set[str]) -> None:
        """Ask the plugin for ``devices`` and record its answer for the container."""
        endpoint = self._registry.endpoint(resource)
        if endpoint is None:
            raise DeviceAllocationError(f"unknown Device Plugin {resource}")
        ids = sorted(devices)
        klog.v(4).info("Making allocation request for device plugin", devices=ids,
                       resourceName=resource, podUID=uid, containerName=name)
        started = time.monotonic()
        try:
            response = await endpoint.allocate(ids)
        except grpc.aio.AioRpcError as err:
            # Upstream passes Allocate's error on bare, without naming the RPC.
            raise DeviceAllocationError(rpc_error_text(err)) from err
        except EndpointStoppedError as err:
            raise DeviceAllocationError(str(err)) from err
        finally:
            metrics.DEVICE_PLUGIN_ALLOC_DURATION.labels(resource).observe(
                time.monotonic() - started)
        if not response.container_responses:
            raise DeviceAllocationError(
                f"no containers return in allocation response {response}")
        topology = self._registry.topology(resource)
        by_numa: dict[int, list[str]] = {}
        for device_id in ids:
            for node in topology.get(device_id) or [NODE_WITHOUT_TOPOLOGY]:
                by_numa.setdefault(node, []).append(device_id)
        self.pod_devices.insert(uid, name, resource, by_numa, response.container_responses[0])

    async def _devices_to_allocate(self, uid: str, name: str, resource: str, required: int,
                                   reusable: set[str]) -> set[str]:
        """Upstream ``devicesToAllocate``: the new devices to ask the plugin for (empty
        when the container already holds them)."""
        needed = required
        held = self.pod_devices.container_devices(uid, name, resource)
        if held is not None:
            klog.v(3).info("Found pre-allocated devices for resource on pod",
                           resourceName=resource, containerName=name, podUID=uid,
                           devices=sorted(held))
            needed -= len(held)
            if needed != 0:
                raise DeviceAllocationError(
                    f"pod {go_quote(uid)} container {go_quote(name)} changed request for "
                    f"resource {go_quote(resource)} from {len(held)} to {required}")
            if (uid, name) in self._initially_running:
                # Running since before this kubelet started: it has its devices already.
                return set()
        healthy = self._registry.healthy(resource)
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
        in_use = self.allocated.setdefault(resource, set())

        def take_from(candidates: set[str]) -> bool:
            """Take candidates until enough; True once nothing more is needed."""
            nonlocal needed
            for device in sorted(candidates - allocated):
                in_use.add(device)
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
        endpoint = self._registry.endpoint(resource)
        if endpoint is None:
            raise DeviceAllocationError(
                f"endpoint not found in cache for a registered resource: {resource}")
        if not endpoint.options.get_preferred_allocation_available:
            return set()
        response = await plugin_call("GetPreferredAllocation", endpoint.get_preferred_allocation(
            sorted(available), sorted(must_include), size))
        if response.container_responses:
            return set(response.container_responses[0].deviceIDs)
        return set()

    def _filter_by_affinity(self, uid: str, name: str, resource: str,
                            available: set[str]) -> tuple[set[str], set[str], set[str]]:
        """Available devices on the container's NUMA affinity, on other nodes, and
        without topology (upstream ``filterByAffinity``)."""
        hint = self._affinity(uid, name) if self._affinity is not None else None
        topology = self._registry.topology(resource)
        if hint is None or hint.affinity is None or not has_topology(topology):
            return set(), set(), set(available)
        aligned, unaligned, no_affinity = set(), set(), set()
        for device in available:
            nodes = topology.get(device) or []
            if not nodes:
                no_affinity.add(device)
            elif any(hint.affinity.is_set(node) for node in nodes):
                aligned.add(device)
            else:
                unaligned.add(device)
        return aligned, unaligned, no_affinity


__all__ = ["AffinityLookup", "DeviceAllocator", "RunningContainers"]
