"""Node capacity and allocatable (upstream: the node status's machine info setter).

Capacity is what the machine has: ``cpu`` (logical CPUs), ``memory``
(``MemTotal``), ``hugepages-<size>`` (reserved huge pages of each size) and
``ephemeral-storage`` (the filesystem of the kubelet's root directory).
Allocatable is capacity minus a reservation, less the memory held in huge
pages. The reservation (``systemReserved`` + ``kubeReserved`` + the hard
eviction thresholds that name a capacity) is the container manager's
decision (``ContainerManager.allocatable_reservation``, upstream
``GetNodeAllocatableReservation``); this module only takes it in, so the
node status, the standalone node that admission reads, and the ``kubepods``
cgroup all agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Protocol

from pykubelet.api.quantity import BINARY_SI, DECIMAL_SI, format_quantity
from pykubelet.cm.helpers import HUGEPAGES_RESOURCE_PREFIX
from pykubelet.nodestatus.machine import MachineInfo

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
HUGEPAGES_PREFIX = HUGEPAGES_RESOURCE_PREFIX

ResourceList = dict[str, Fraction]


class NodeResources(Protocol):
    """Capacity and reservation of the node (upstream ``ContainerManager`` getters)."""

    def capacity(self) -> ResourceList:
        """Machine capacity: cpu, memory, hugepages-*, ephemeral-storage (not pods)."""
        ...

    def allocatable_reservation(self) -> ResourceList:
        """What allocatable leaves out of each capacity."""
        ...


def is_hugepage_resource(name: str) -> bool:
    return name.startswith(HUGEPAGES_PREFIX)


def hugepage_resource_name(page_size: int) -> str:
    """``hugepages-2Mi`` for 2 MiB pages."""
    return HUGEPAGES_PREFIX + format_quantity(page_size, BINARY_SI)


def quantity_format(resource: str) -> str:
    """How upstream writes each resource: bytes in binary units, the rest in decimal."""
    if resource in (MEMORY, EPHEMERAL_STORAGE) or is_hugepage_resource(resource):
        return BINARY_SI
    return DECIMAL_SI


def format_resources(values: Mapping[str, Fraction]) -> dict[str, str]:
    """A resource list as the API writes it (``{"cpu": "2", "memory": "24585644Ki"}``)."""
    return {name: format_quantity(value, quantity_format(name)) for name, value in values.items()}


def machine_capacity(machine: MachineInfo, ephemeral_storage: int | None) -> ResourceList:
    """Upstream ``CapacityFromMachineInfo`` plus the root filesystem's size."""
    capacity: ResourceList = {
        CPU: Fraction(machine.num_cores),
        MEMORY: Fraction(machine.memory_capacity),
    }
    for page_size, pages in machine.hugepages.items():
        capacity[hugepage_resource_name(page_size)] = Fraction(page_size * pages)
    if ephemeral_storage is not None:
        capacity[EPHEMERAL_STORAGE] = Fraction(ephemeral_storage)
    return capacity


class MachineResources:
    """``NodeResources`` from the machine, with the container manager's reservation."""

    def __init__(self, machine: MachineInfo, ephemeral_storage: int | None,
                 reservation: Callable[[], ResourceList] = dict) -> None:
        self._capacity = machine_capacity(machine, ephemeral_storage)
        self._reservation = reservation

    def capacity(self) -> ResourceList:
        return dict(self._capacity)

    def allocatable_reservation(self) -> ResourceList:
        return {name: value for name, value in self._reservation().items()
                if name in self._capacity and value}


def pods_capacity(max_pods: int, pods_per_core: int, num_cores: int) -> int:
    """``maxPods``, or fewer when ``podsPerCore`` caps it."""
    if pods_per_core > 0:
        return min(num_cores * pods_per_core, max_pods)
    return max_pods


def allocatable_status(resources: NodeResources, pods: int) -> dict[str, str]:
    """Allocatable as the Node's status writes it, with ``pods`` pods (what admission reads
    of a node that has no status in the API server yet)."""
    capacity = resources.capacity()
    capacity[PODS] = Fraction(pods)
    return format_resources(allocatable_from(capacity, resources.allocatable_reservation()))


def allocatable_from(capacity: Mapping[str, Fraction],
                     reservation: Mapping[str, Fraction]) -> ResourceList:
    """Capacity less the reservation (never negative), less memory held in huge pages."""
    allocatable = {name: max(value - reservation.get(name, Fraction(0)), Fraction(0))
                   for name, value in capacity.items()}
    for name, value in capacity.items():
        if is_hugepage_resource(name) and MEMORY in allocatable:
            allocatable[MEMORY] = max(allocatable[MEMORY] - value, Fraction(0))
    return allocatable


__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "MachineResources",
    "NodeResources",
    "ResourceList",
    "allocatable_from",
    "allocatable_status",
    "format_resources",
    "hugepage_resource_name",
    "is_hugepage_resource",
    "machine_capacity",
    "pods_capacity",
    "quantity_format",
]
