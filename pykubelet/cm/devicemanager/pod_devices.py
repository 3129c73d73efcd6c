"""Which container holds which devices, and what the plugin answered for them
(upstream ``devicemanager/pod_devices.go``).

Keyed by pod UID, container name and resource name; each entry keeps the device
ids by NUMA node and the plugin's ``ContainerAllocateResponse``, which is what the
container is created with (``run_options``) and what the checkpoint stores.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.cm.devicemanager.checkpoint import PodDevicesEntry
from pykubelet.container.devices import DeviceMount, DeviceRunOptions, DeviceSpec
from pykubelet.util import klog


@dataclass
class DeviceAllocation:
    # NUMA node -> device ids.
    by_numa: dict[int, list[str]]
    response: pluginapi.ContainerAllocateResponse

    def ids(self) -> set[str]:
        return {d for ids in self.by_numa.values() for d in ids}


class PodDevices:
    def __init__(self) -> None:
        self._devs: dict[str, dict[str, dict[str, DeviceAllocation]]] = {}

    def pods(self) -> set[str]:
        return set(self._devs)

    def insert(self, pod_uid: str, container: str, resource: str,
               by_numa: dict[int, list[str]],
               response: pluginapi.ContainerAllocateResponse) -> None:
        self._devs.setdefault(pod_uid, {}).setdefault(container, {})[resource] = \
            DeviceAllocation(by_numa, response)

    def delete(self, pod_uids: Iterable[str]) -> None:
        for uid in pod_uids:
            self._devs.pop(uid, None)

    def container_devices(self, pod_uid: str, container: str, resource: str) -> set[str] | None:
        """The devices of ``resource`` the container holds; None when it holds none."""
        allocation = self._devs.get(pod_uid, {}).get(container, {}).get(resource)
        return allocation.ids() if allocation is not None else None

    def pod_devices(self, pod_uid: str, resource: str) -> set[str]:
        """The devices of ``resource`` any container of the pod holds."""
        held: set[str] = set()
        for resources in self._devs.get(pod_uid, {}).values():
            allocation = resources.get(resource)
            if allocation is not None:
                held |= allocation.ids()
        return held

    def container_allocations(self, pod_uid: str,
                              container: str) -> dict[str, DeviceAllocation]:
        return dict(self._devs.get(pod_uid, {}).get(container, {}))

    def add_container_allocated(self, pod_uid: str, container: str,
                                reusable: dict[str, set[str]]) -> None:
        """An init container's devices become reusable by the pod's next containers."""
        for resource, allocation in self._devs.get(pod_uid, {}).get(container, {}).items():
            reusable.setdefault(resource, set()).update(allocation.ids())

    def remove_container_allocated(self, pod_uid: str, container: str,
                                   reusable: dict[str, set[str]]) -> None:
        """An app container's devices are no longer reusable by the others."""
        for resource, allocation in self._devs.get(pod_uid, {}).get(container, {}).items():
            reusable.setdefault(resource, set()).difference_update(allocation.ids())

    def devices(self) -> dict[str, set[str]]:
        """Every device in use, by resource."""
        used: dict[str, set[str]] = {}
        for containers in self._devs.values():
            for resources in containers.values():
                for resource, allocation in resources.items():
                    used.setdefault(resource, set()).update(allocation.ids())
        return used

    # -- the checkpoint ------------------------------------------------------------------

    def to_checkpoint(self) -> list[PodDevicesEntry]:
        entries = []
        for uid, containers in self._devs.items():
            for name, resources in containers.items():
                for resource, allocation in resources.items():
                    entries.append(PodDevicesEntry(
                        uid, name, resource, allocation.by_numa,
                        allocation.response.SerializeToString(deterministic=True)))
        return entries

    def from_checkpoint(self, entries: Iterable[PodDevicesEntry]) -> None:
        for entry in entries:
            response = pluginapi.ContainerAllocateResponse()
            try:
                response.ParseFromString(entry.alloc_resp)
            except Exception as err:  # a bad entry must not cost the others
                klog.error("Can't unmarshal allocResp", err, podUID=entry.pod_uid,
                           containerName=entry.container_name,
                           resourceName=entry.resource_name)
                continue
            self.insert(entry.pod_uid, entry.container_name, entry.resource_name,
                        {node: list(ids) for node, ids in entry.device_ids.items()}, response)

    # -- what the container gets -----------------------------------------------------------

    def run_options(self, pod_uid: str, container: str) -> DeviceRunOptions | None:
        """The merged answers for every resource the container holds (None: it holds none).

        A name or container path given twice keeps its first value; a different second
        value is logged, as upstream does."""
        resources = self._devs.get(pod_uid, {}).get(container)
        if resources is None:
            return None
        envs: dict[str, str] = {}
        annotations: dict[str, str] = {}
        mounts: dict[str, DeviceMount] = {}
        devices: dict[str, DeviceSpec] = {}
        cdi: list[str] = []

        def merge(kind: str, into: dict[str, str], key: str, value: str) -> None:
            if key in into:
                if into[key] != value:
                    klog.error(f"{kind} has conflicting setting", name=key, first=into[key],
                               second=value)
                return
            into[key] = value

        for allocation in resources.values():
            response = allocation.response
            for key, value in response.envs.items():
                merge("Environment variable", envs, key, value)
            for dev in response.devices:
                if dev.container_path in devices:
                    if devices[dev.container_path].host_path != dev.host_path:
                        klog.error("Container device has conflicting mapping host devices",
                                   path=dev.container_path,
                                   first=devices[dev.container_path].host_path,
                                   second=dev.host_path)
                    continue
                devices[dev.container_path] = DeviceSpec(dev.container_path, dev.host_path,
                                                         dev.permissions)
            for mount in response.mounts:
                if mount.container_path in mounts:
                    if mounts[mount.container_path].host_path != mount.host_path:
                        klog.error("Container mount has conflicting mapping host mounts",
                                   path=mount.container_path,
                                   first=mounts[mount.container_path].host_path,
                                   second=mount.host_path)
                    continue
                mounts[mount.container_path] = DeviceMount(mount.container_path,
                                                           mount.host_path, mount.read_only)
            for key, value in response.annotations.items():
                merge("Annotation", annotations, key, value)
            for device in response.cdi_devices:
                if device.name and device.name not in cdi:
                    cdi.append(device.name)
        return DeviceRunOptions(envs=envs, mounts=list(mounts.values()),
                                devices=list(devices.values()), annotations=annotations,
                                cdi_devices=cdi)


__all__ = ["DeviceAllocation", "PodDevices"]
