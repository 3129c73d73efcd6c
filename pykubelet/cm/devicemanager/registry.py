"""The registered device plugins and their devices (upstream ``manager.go``'s endpoint
half: ``genericDeviceUpdateCallback``, ``GetCapacity``, the endpoint map).

- Registration: plugins register on ``kubelet.sock`` (``server.py``) or are found
  by the plugin watcher (``plugin_handler.py``); either way the registry dials
  each, follows its ``ListAndWatch`` in a task of its own, and keeps per resource
  every device (with its NUMA nodes) and which are healthy. A plugin registering
  again replaces its old endpoint; one whose socket the watcher saw removed is
  stopped as if its stream had ended.
- A plugin whose stream ends has all its devices marked unhealthy at once
  (allocatable 0, capacity unchanged) and its channel closed.
- Expiry: once a stopped plugin has stayed away for the grace period (5 minutes)
  its resource is deleted by ``expire_stopped``, which the manager's housekeeping
  runs; the resource is then reported as removed (the node status sets its
  capacity to 0) until its plugin registers again.

``changed`` is called after anything the checkpoint records (the healthy devices)
may have changed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence

import grpc.aio

from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.cm.devicemanager.checkpoint import CHECKPOINT_NAME
from pykubelet.cm.devicemanager.endpoint import Endpoint, rpc_error_text
from pykubelet.cm.devicemanager.server import RegistrationServer
from pykubelet.cm.devicemanager.topology_hints import DeviceTopology
from pykubelet.util import klog

HEALTHY = "Healthy"


def _numa_nodes_of(device: pluginapi.Device) -> list[int]:
    """The NUMA nodes the plugin says the device sits on (empty: no topology)."""
    if not device.HasField("topology"):
        return []
    return [int(node.ID) for node in device.topology.nodes]


class PluginRegistry:
    def __init__(self, *, plugin_dir: str, changed: Callable[[], None],
                 grace_period: float, clock: Callable[[], float]) -> None:
        self._changed = changed
        self._grace_period = grace_period
        self._clock = clock
        self.server = RegistrationServer(plugin_dir, self._connect, keep=CHECKPOINT_NAME)
        self._endpoints: dict[str, Endpoint] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._all_devices: dict[str, dict[str, pluginapi.Device]] = {}
        self._healthy: dict[str, set[str]] = {}
        self._unhealthy: dict[str, set[str]] = {}
        # Resources deleted by expiry, reported as removed until registered again.
        self._expired: set[str] = set()

    def restore(self, resources: Iterable[str]) -> None:
        """Resources the checkpoint names: no devices until their plugins register
        again; their endpoints are stopped, so they expire if that takes too long."""
        for resource in resources:
            self._healthy[resource] = set()
            self._unhealthy[resource] = set()
            self._endpoints[resource] = Endpoint(resource, None, clock=self._clock)

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

    # -- what the rest of the manager reads ------------------------------------------------

    def is_registered(self, resource: str) -> bool:
        return resource in self._healthy

    def endpoint(self, resource: str) -> Endpoint | None:
        return self._endpoints.get(resource)

    def healthy(self, resource: str) -> set[str] | None:
        """The resource's healthy devices; None when no plugin ever registered it."""
        return self._healthy.get(resource)

    def healthy_devices(self) -> dict[str, set[str]]:
        return {resource: set(ids) for resource, ids in self._healthy.items()}

    def topology(self, resource: str) -> DeviceTopology:
        """Every device of ``resource`` (healthy or not) with its NUMA nodes."""
        return {device_id: _numa_nodes_of(device)
                for device_id, device in self._all_devices.get(resource, {}).items()}

    def capacity(self) -> tuple[dict[str, int], dict[str, int], list[str]]:
        """Capacity (all devices) and allocatable (healthy ones) per resource, and the
        resources deleted by expiry. Changes nothing."""
        capacity: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        for resource in sorted(set(self._healthy) | set(self._unhealthy)):
            healthy = len(self._healthy.get(resource, ()))
            capacity[resource] = healthy + len(self._unhealthy.get(resource, ()))
            allocatable[resource] = healthy
        return capacity, allocatable, sorted(self._expired)

    def allocatable(self) -> dict[str, int]:
        return {resource: len(ids) for resource, ids in self._healthy.items()}

    # -- expiry ------------------------------------------------------------------------------

    def expire_stopped(self) -> list[str]:
        """Delete the resources whose plugin has been stopped past the grace period (or
        that have no endpoint at all); the ones deleted now."""
        expired = []
        for resource in sorted(set(self._healthy) | set(self._unhealthy)):
            endpoint = self._endpoints.get(resource)
            if endpoint is not None and not endpoint.stop_grace_period_expired(
                    self._grace_period):
                continue
            self._endpoints.pop(resource, None)
            self._healthy.pop(resource, None)
            self._unhealthy.pop(resource, None)
            self._expired.add(resource)
            expired.append(resource)
        if expired:
            klog.info("Device plugin resources expired", resourceNames=expired)
            self._changed()
        return expired

    # -- plugins -----------------------------------------------------------------------------

    async def register_plugin(self, resource: str, socket_path: str) -> None:
        """A plugin found by the plugin watcher: connected exactly as one that called
        ``Register`` (raises when it cannot be)."""
        await self._connect(resource, socket_path)

    async def deregister_plugin(self, resource: str, socket_path: str) -> None:
        """The plugin watcher saw the plugin's socket go: its device stream is stopped and
        its devices become unhealthy at once, as when the stream ends (its resource stays
        on the node until the grace period runs out). Nothing happens when ``resource``
        is served by another socket now (the plugin registered anew)."""
        endpoint = self._endpoints.get(resource)
        if endpoint is None or endpoint.socket_path != socket_path or endpoint.is_stopped():
            return
        watcher = self._watchers.pop(resource, None)
        if watcher is not None:
            watcher.cancel()
            await asyncio.wait([watcher])
        self._disconnected(endpoint)
        await endpoint.close()

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
        self._expired.discard(resource)
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
                       rpc_error_text(err), resourceName=resource)
        except Exception as err:  # any end of the stream is the plugin gone
            klog.error("listAndWatch ended unexpectedly for device plugin", err,
                       resourceName=resource)
        self._disconnected(endpoint)
        # Nothing more goes over this channel: a plugin that comes back registers
        # anew, one that never does must not be dialed for ever.
        await endpoint.close()

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
        self._changed()

    def _update_devices(self, resource: str, devices: Sequence[pluginapi.Device]) -> None:
        self._all_devices[resource] = {d.ID: d for d in devices}
        self._healthy[resource] = {d.ID for d in devices if d.health == HEALTHY}
        self._unhealthy[resource] = {d.ID for d in devices if d.health != HEALTHY}
        klog.v(2).info("Processed device updates for resource", resourceName=resource,
                       totalCount=len(devices), healthyCount=len(self._healthy[resource]))
        self._changed()


__all__ = ["HEALTHY", "PluginRegistry"]
