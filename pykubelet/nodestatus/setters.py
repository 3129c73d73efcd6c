"""The pieces of a Node's status, one setter each (upstream ``pkg/kubelet/nodestatus``).

Each setter fills in its part of a ``V1Node`` in place: addresses, capacity
and allocatable, versions, the kubelet's port, images, the Go platform, and
the four conditions. The status manager runs them in upstream's order on a
copy of the Node it last read, then compares and patches. A setter that fails
leaves its part as it was and the others still run.

Conditions keep their ``lastTransitionTime`` while their status holds and get
a fresh ``lastHeartbeatTime`` every time; a change of status is also recorded
as a node event (``NodeReady``, ``NodeHasSufficientMemory``...), worded as
upstream words them. ``Ready`` is always the last condition.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from kubernetes_asyncio.client import (
    V1ContainerImage,
    V1DaemonEndpoint,
    V1Node,
    V1NodeAddress,
    V1NodeCondition,
    V1NodeDaemonEndpoints,
    V1NodeStatus,
    V1NodeSystemInfo,
)

from pykubelet.api.quantity import parse_quantity
from pykubelet.api.wellknown import (
    ANNOTATION_PROVIDED_NODE_IP,
    go_arch,
    go_os,
    kubelet_version,
)
from pykubelet.events import NORMAL, WARNING
from pykubelet.nodestatus.machine import MachineInfo, VersionInfo
from pykubelet.nodestatus.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    NodeResources,
    allocatable_from,
    format_resources,
    pods_capacity,
)
from pykubelet.util import klog

Setter = Callable[[V1Node], Awaitable[None]]
Clock = Callable[[], datetime.datetime]
# (event type, reason): a node condition event, "Node <name> status is now: <reason>".
RecordStatusEvent = Callable[[str, str], None]
# (event type, reason, message): any other node event.
RecordEvent = Callable[[str, str, str], None]

NODE_READY = "Ready"
NODE_MEMORY_PRESSURE = "MemoryPressure"
NODE_DISK_PRESSURE = "DiskPressure"
NODE_PID_PRESSURE = "PIDPressure"
INTERNAL_IP = "InternalIP"
HOSTNAME = "Hostname"
MAX_NAMES_PER_IMAGE = 5
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"

EVENT_NODE_READY = "NodeReady"
EVENT_NODE_NOT_READY = "NodeNotReady"
EVENT_REBOOTED = "Rebooted"


class RuntimeHealth(Protocol):
    """Upstream ``runtimeState``: why pods cannot run on this node right now."""

    def runtime_errors(self) -> list[str]: ...

    def network_errors(self) -> list[str]: ...


class PressureReporter(Protocol):
    """Upstream's eviction manager, as far as node conditions go."""

    def is_under_memory_pressure(self) -> bool: ...

    def is_under_disk_pressure(self) -> bool: ...

    def is_under_pid_pressure(self) -> bool: ...


class NoPressure:
    """The pressure reporter until eviction exists: never under pressure."""

    def is_under_memory_pressure(self) -> bool:
        return False

    def is_under_disk_pressure(self) -> bool:
        return False

    def is_under_pid_pressure(self) -> bool:
        return False


@dataclass(frozen=True)
class Image:
    """One image on the node, for ``status.images``."""

    names: tuple[str, ...]
    size_bytes: int


def utcnow() -> datetime.datetime:
    """Now, in whole seconds: the API stores condition times at that precision."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _status(node: V1Node) -> V1NodeStatus:
    if node.status is None:
        node.status = V1NodeStatus()
    return node.status


def _node_info(node: V1Node) -> V1NodeSystemInfo:
    status = _status(node)
    if status.node_info is None:
        status.node_info = V1NodeSystemInfo(
            architecture="", boot_id="", container_runtime_version="", kernel_version="",
            kube_proxy_version="", kubelet_version="", machine_id="", operating_system="",
            os_image="", system_uuid="")
    info: V1NodeSystemInfo = status.node_info
    return info


# -- addresses ---------------------------------------------------------------


def validate_node_ip(address: str) -> None:
    """Upstream ``validateNodeIP``: a usable unicast address of one of this host's interfaces."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as err:
        raise ValueError("nodeIP must be a valid IP address") from err
    if ip.is_loopback:
        raise ValueError("nodeIP can't be loopback address")
    if ip.is_multicast:
        raise ValueError("nodeIP can't be a multicast address")
    if ip.is_link_local:
        raise ValueError("nodeIP can't be a link-local unicast address")
    if ip.is_unspecified:
        raise ValueError("nodeIP can't be an all zeros address")
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    # Only a local address can be bound (without ip_nonlocal_bind): no packet is sent.
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
    except OSError as err:
        raise ValueError(f'node IP: "{address}" not found in the host\'s network interfaces'
                         ) from err


def default_route_address() -> str | None:
    """The address of the default route's interface (upstream ``ChooseHostInterface``)."""
    for family, target in ((socket.AF_INET, "10.255.255.255"), (socket.AF_INET6, "fd00::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                # connect() on UDP only picks a route and a source address.
                probe.connect((target, 1))
                return str(probe.getsockname()[0])
        except OSError:
            continue
    return None


async def _lookup(node_name: str) -> str | None:
    """The first usable address the node's name resolves to, IPv4 first."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(node_name, None)
    except (OSError, UnicodeError):
        return None
    candidates: list[str] = []
    for family, *_rest, sockaddr in infos:
        address = str(sockaddr[0])
        try:
            validate_node_ip(address)
        except ValueError:
            continue
        if family == socket.AF_INET:
            return address
        candidates.append(address)
    return candidates[0] if candidates else None


def node_address(node_ips: Sequence[str], hostname: str, *,
                 external_cloud_provider: bool = False) -> Setter:
    """InternalIP (``--node-ip``, else the hostname if it is an IP, else DNS, else the
    default route's interface) and Hostname.

    With an external cloud provider the cloud controller manager owns the addresses:
    the Node carries ``--node-ip`` in the provided-node-ip annotation for it to honour,
    and once the Node has addresses (the controller's, or the ones this setter wrote
    at registration) they are left alone. Before that, a Node without ``--node-ip``
    gets only its Hostname, so that no guessed InternalIP reaches host-network pods.
    Without an external cloud provider a stale annotation is removed.
    """

    async def setter(node: V1Node) -> None:
        for address in node_ips:
            try:
                validate_node_ip(address)
            except ValueError as err:
                raise ValueError(f"failed to validate nodeIP: {err}") from err
        _provided_node_ip_annotation(node, ",".join(node_ips) if external_cloud_provider
                                     else "")
        status = _status(node)
        if external_cloud_provider:
            if status.addresses:
                return
            if not node_ips:
                status.addresses = [V1NodeAddress(type=HOSTNAME, address=hostname)]
                return
        addresses: list[str] = list(node_ips)
        if not addresses:
            chosen: str | None = None
            try:
                chosen = str(ipaddress.ip_address(hostname))
            except ValueError:
                chosen = await _lookup(node.metadata.name) or default_route_address()
            if chosen is None:
                raise ValueError(f"can't get ip address of node {node.metadata.name}")
            addresses = [chosen]
        status.addresses = [
            *(V1NodeAddress(type=INTERNAL_IP, address=a) for a in addresses),
            V1NodeAddress(type=HOSTNAME, address=hostname),
        ]

    return setter


def _provided_node_ip_annotation(node: V1Node, value: str) -> None:
    """Set the provided-node-ip annotation to ``value``; remove it when ``value`` is empty."""
    annotations = dict(node.metadata.annotations or {})
    if value:
        annotations[ANNOTATION_PROVIDED_NODE_IP] = value
    elif annotations.pop(ANNOTATION_PROVIDED_NODE_IP, None) is None:
        return
    node.metadata.annotations = annotations


# -- capacity ---------------------------------------------------------------


# The device plugins' (capacity, allocatable, deleted resources): devicemanager get_capacity.
DeviceCapacity = Callable[[], tuple[dict[str, int], dict[str, int], list[str]]]


def machine_info(node_name: str, max_pods: int, pods_per_core: int, machine: MachineInfo,
                 resources: NodeResources, record_event: RecordEvent,
                 device_capacity: DeviceCapacity | None = None) -> Setter:
    """Capacity from the machine, allocatable = capacity - reservation, machine and boot ids.

    Device plugin resources: capacity counts every device, allocatable the healthy
    ones; a resource whose plugin is gone for good is set to 0 rather than removed,
    which tells it apart from cluster-level extended resources, as upstream."""

    async def setter(node: V1Node) -> None:
        status = _status(node)
        capacity = {name: parse_quantity(value) for name, value in (status.capacity or {}).items()}
        info = _node_info(node)
        info.machine_id = machine.machine_id
        info.system_uuid = machine.system_uuid
        machine_capacity = resources.capacity()
        for name, value in machine_capacity.items():
            if name != EPHEMERAL_STORAGE:
                capacity[name] = value
        capacity[PODS] = Fraction(pods_capacity(max_pods, pods_per_core, machine.num_cores))
        if info.boot_id and info.boot_id != machine.boot_id:
            record_event(WARNING, EVENT_REBOOTED,
                         f"Node {node_name} has been rebooted, boot id: {machine.boot_id}")
        info.boot_id = machine.boot_id
        if EPHEMERAL_STORAGE in machine_capacity:
            capacity[EPHEMERAL_STORAGE] = machine_capacity[EPHEMERAL_STORAGE]
        devices, device_allocatable, deleted = (device_capacity() if device_capacity
                                                 is not None else ({}, {}, []))
        for name, count in devices.items():
            capacity[name] = Fraction(count)
        for name in deleted:
            capacity[name] = Fraction(0)

        allocatable = allocatable_from(capacity, resources.allocatable_reservation())
        for name, count in device_allocatable.items():
            allocatable[name] = Fraction(count)
        status.capacity = format_resources(capacity)
        status.allocatable = format_resources(allocatable)

    return setter


# -- versions and platform -------------------------------------------------------


def version_info(version: VersionInfo,
                 runtime_version: Callable[[], Awaitable[tuple[str, str]]]) -> Setter:
    """Kernel, OS image, ``<runtime>://<version>`` and the kubelet's own version."""

    async def setter(node: V1Node) -> None:
        info = _node_info(node)
        info.kernel_version = version.kernel_version
        info.os_image = version.os_image
        try:
            runtime_type, runtime_ver = await runtime_version()
        except Exception as err:  # upstream writes "Unknown" rather than failing the setter
            klog.v(4).info("Container runtime version unknown", err=str(err))
            runtime_type, runtime_ver = "", "Unknown"
        info.container_runtime_version = f"{runtime_type}://{runtime_ver}"
        info.kubelet_version = kubelet_version()
        info.kube_proxy_version = ""

    return setter


def daemon_endpoints(port: int) -> Setter:
    async def setter(node: V1Node) -> None:
        _status(node).daemon_endpoints = V1NodeDaemonEndpoints(
            kubelet_endpoint=V1DaemonEndpoint(port=port))

    return setter


def images(max_images: int, image_list: Callable[[], Awaitable[Sequence[Image]]]) -> Setter:
    """The biggest images first, at most ``nodeStatusMaxImages`` (-1: all), 5 names each."""

    async def setter(node: V1Node) -> None:
        status = _status(node)
        try:
            listed = list(await image_list())
        except Exception as err:
            status.images = []
            raise RuntimeError(f"error getting image list: {err}") from err
        listed.sort(key=lambda image: image.size_bytes, reverse=True)
        if max_images > -1:
            listed = listed[:max_images]
        status.images = [V1ContainerImage(names=list(image.names[:MAX_NAMES_PER_IMAGE]),
                                          size_bytes=image.size_bytes) for image in listed]

    return setter


def go_runtime() -> Setter:
    async def setter(node: V1Node) -> None:
        info = _node_info(node)
        info.operating_system = go_os()
        info.architecture = go_arch()

    return setter


# -- conditions -------------------------------------------------------------


def _find(node: V1Node, condition_type: str) -> V1NodeCondition | None:
    for condition in _status(node).conditions or []:
        if condition.type == condition_type:
            return condition
    return None


@dataclass(frozen=True)
class _PressureWording:
    condition: str
    true_reason: str
    true_message: str
    true_event: str
    false_reason: str
    false_message: str
    false_event: str


_MEMORY = _PressureWording(
    NODE_MEMORY_PRESSURE, "KubeletHasInsufficientMemory",
    "kubelet has insufficient memory available", "NodeHasInsufficientMemory",
    "KubeletHasSufficientMemory", "kubelet has sufficient memory available",
    "NodeHasSufficientMemory")
_DISK = _PressureWording(
    NODE_DISK_PRESSURE, "KubeletHasDiskPressure", "kubelet has disk pressure",
    "NodeHasDiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure",
    "NodeHasNoDiskPressure")
_PID = _PressureWording(
    NODE_PID_PRESSURE, "KubeletHasInsufficientPID", "kubelet has insufficient PID available",
    "NodeHasInsufficientPID", "KubeletHasSufficientPID", "kubelet has sufficient PID available",
    "NodeHasSufficientPID")


def _pressure_condition(wording: _PressureWording, now: Clock, under_pressure: Callable[[], bool],
                        record: RecordStatusEvent) -> Setter:
    async def setter(node: V1Node) -> None:
        current = now()
        condition = _find(node, wording.condition)
        created = condition is None
        if condition is None:
            condition = V1NodeCondition(type=wording.condition, status=UNKNOWN)
        condition.last_heartbeat_time = current
        if under_pressure():
            if condition.status != TRUE:
                condition.status = TRUE
                condition.reason = wording.true_reason
                condition.message = wording.true_message
                condition.last_transition_time = current
                record(NORMAL, wording.true_event)
        elif condition.status != FALSE:
            condition.status = FALSE
            condition.reason = wording.false_reason
            condition.message = wording.false_message
            condition.last_transition_time = current
            record(NORMAL, wording.false_event)
        if created:
            status = _status(node)
            status.conditions = [*(status.conditions or []), condition]

    return setter


def memory_pressure_condition(now: Clock, pressure: PressureReporter,
                              record: RecordStatusEvent) -> Setter:
    return _pressure_condition(_MEMORY, now, pressure.is_under_memory_pressure, record)


def disk_pressure_condition(now: Clock, pressure: PressureReporter,
                            record: RecordStatusEvent) -> Setter:
    return _pressure_condition(_DISK, now, pressure.is_under_disk_pressure, record)


def pid_pressure_condition(now: Clock, pressure: PressureReporter,
                           record: RecordStatusEvent) -> Setter:
    return _pressure_condition(_PID, now, pressure.is_under_pid_pressure, record)


def aggregate_message(errors: Sequence[str]) -> str:
    """Several errors as upstream's aggregate error prints them: ``[a, b]``, one as itself."""
    unique = list(dict.fromkeys(e for e in errors if e))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


def ready_condition(now: Clock, health: RuntimeHealth, record: RecordStatusEvent,
                    local_storage_capacity_isolation: bool = True) -> Setter:
    """Ready when the runtime, its network and PLEG are healthy and capacity is known."""

    async def setter(node: V1Node) -> None:
        current = now()
        errors = [*health.runtime_errors(), *health.network_errors()]
        required = [CPU, MEMORY, PODS]
        if local_storage_capacity_isolation:
            required.append(EPHEMERAL_STORAGE)
        capacity = _status(node).capacity or {}
        missing = [name for name in required if name not in capacity]
        if missing:
            errors.append(f"missing node capacity for resources: {', '.join(missing)}")
        if errors:
            fresh = V1NodeCondition(type=NODE_READY, status=FALSE, reason="KubeletNotReady",
                                    message=aggregate_message(errors),
                                    last_heartbeat_time=current)
        else:
            fresh = V1NodeCondition(type=NODE_READY, status=TRUE, reason="KubeletReady",
                                    message="kubelet is posting ready status",
                                    last_heartbeat_time=current)
        status = _status(node)
        conditions = list(status.conditions or [])
        record_transition = False
        for index, condition in enumerate(conditions):
            if condition.type == NODE_READY:
                if condition.status == fresh.status:
                    fresh.last_transition_time = condition.last_transition_time
                else:
                    fresh.last_transition_time = current
                    record_transition = True
                conditions[index] = fresh
                break
        else:
            fresh.last_transition_time = current
            conditions.append(fresh)
        status.conditions = conditions
        if record_transition:
            if fresh.status == TRUE:
                record(NORMAL, EVENT_NODE_READY)
            else:
                record(NORMAL, EVENT_NODE_NOT_READY)
                klog.info("Node became not ready", node=node.metadata.name,
                          reason=fresh.reason, message=fresh.message)

    return setter


__all__ = [
    "EVENT_NODE_NOT_READY",
    "EVENT_NODE_READY",
    "EVENT_REBOOTED",
    "HOSTNAME",
    "INTERNAL_IP",
    "NODE_DISK_PRESSURE",
    "NODE_MEMORY_PRESSURE",
    "NODE_PID_PRESSURE",
    "NODE_READY",
    "DeviceCapacity",
    "Image",
    "NoPressure",
    "PressureReporter",
    "RecordEvent",
    "RecordStatusEvent",
    "RuntimeHealth",
    "Setter",
    "aggregate_message",
    "daemon_endpoints",
    "default_route_address",
    "disk_pressure_condition",
    "go_runtime",
    "images",
    "machine_info",
    "memory_pressure_condition",
    "node_address",
    "pid_pressure_condition",
    "ready_condition",
    "utcnow",
    "validate_node_ip",
    "version_info",
]
