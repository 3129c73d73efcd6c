"""The Node object of this kubelet: registration and status (upstream ``kubelet_node_status.go``
and ``pkg/kubelet/nodestatus``).

- ``machine``: what the machine has (CPUs, memory, huge pages, ids, kernel, OS).
- ``resources``: capacity and the allocatable reservation (``NodeResources``
  Protocol; resource management may hand in its own).
- ``setters``: one function per part of the status, conditions included.
- ``patch``: "did it change?" and the strategic merge patch that writes it.
- ``providers``: cached CRI image list and runtime version.
- ``manager``: registration, the periodic sync and the fast first update.

``node_status_setters`` lists the setters in upstream's order for a manager.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from pykubelet.nodestatus import setters as s
from pykubelet.nodestatus.machine import MachineInfo, VersionInfo
from pykubelet.nodestatus.manager import (
    NodeStatusManager,
    NodeStatusOptions,
    birth_cry,
)
from pykubelet.nodestatus.resources import MachineResources, NodeResources
from pykubelet.nodestatus.setters import (
    Image,
    NoPressure,
    PressureReporter,
    RuntimeHealth,
    Setter,
    utcnow,
)


def node_status_setters(manager: NodeStatusManager, *, node_ips: Sequence[str], hostname: str,
                        machine: MachineInfo, version: VersionInfo, resources: NodeResources,
                        max_pods: int, pods_per_core: int, daemon_port: int, max_images: int,
                        image_list: Callable[[], Awaitable[Sequence[Image]]],
                        runtime_version: Callable[[], Awaitable[tuple[str, str]]],
                        health: RuntimeHealth, pressure: PressureReporter,
                        local_storage_capacity_isolation: bool = True,
                        external_cloud_provider: bool = False,
                        device_capacity: s.DeviceCapacity | None = None,
                        now: s.Clock = utcnow) -> list[Setter]:
    """Upstream ``defaultNodeStatusFuncs``: addresses, machine, versions, endpoints, images,
    platform, then MemoryPressure, DiskPressure, PIDPressure and Ready."""
    record = manager.record_node_status_event
    return [
        s.node_address(node_ips, hostname, external_cloud_provider=external_cloud_provider),
        s.machine_info(manager.node_name, max_pods, pods_per_core, machine, resources,
                       manager.record_event, device_capacity),
        s.version_info(version, runtime_version),
        s.daemon_endpoints(daemon_port),
        s.images(max_images, image_list),
        s.go_runtime(),
        s.memory_pressure_condition(now, pressure, record),
        s.disk_pressure_condition(now, pressure, record),
        s.pid_pressure_condition(now, pressure, record),
        s.ready_condition(now, health, record, local_storage_capacity_isolation),
    ]


__all__ = [
    "Image",
    "MachineResources",
    "NoPressure",
    "NodeResources",
    "NodeStatusManager",
    "NodeStatusOptions",
    "PressureReporter",
    "RuntimeHealth",
    "birth_cry",
    "node_status_setters",
]
