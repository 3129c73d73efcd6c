"""Node capacity and what is held back from pods (upstream: the container manager's half).

Capacity is what the machine has: ``cpu`` (logical CPUs), ``memory``
(``MemTotal``), ``hugepages-<size>`` (reserved huge pages of each size) and
``ephemeral-storage`` (the filesystem of the kubelet's root directory).
Allocatable is capacity minus a reservation: ``systemReserved`` +
``kubeReserved`` + the hard eviction thresholds that name a capacity
(``memory.available`` holds back memory, ``nodefs.available`` holds back
ephemeral storage; a percentage is taken of the capacity).

The node status only sees the ``NodeResources`` Protocol: the resource
management subsystem (cgroups, eviction) owns these numbers once it exists and
can hand its own implementation in; ``MachineResources`` is the reading of the
machine and configuration that serves until then.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from fractions import Fraction
from typing import Protocol

from pykubelet.api.quantity import BINARY_SI, DECIMAL_SI, format_quantity, parse_quantity
from pykubelet.nodestatus.machine import MachineInfo

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"

SIGNAL_MEMORY_AVAILABLE = "memory.available"
SIGNAL_NODEFS_AVAILABLE = "nodefs.available"
# Which capacity each hard eviction signal holds back (upstream hardEvictionReservation).
_SIGNAL_RESOURCE = {SIGNAL_MEMORY_AVAILABLE: MEMORY, SIGNAL_NODEFS_AVAILABLE: EPHEMERAL_STORAGE}

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


def _float32(value: float) -> float:
    """``value`` rounded to a float32, as upstream stores threshold percentages."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def threshold_quantity(value: str, capacity: Fraction) -> Fraction:
    """An eviction threshold value (``100Mi`` or ``10%``) as an amount of ``capacity``."""
    text = value.strip()
    if text.endswith("%"):
        percentage = _float32(float(text[:-1]) / 100)
        return Fraction(math.trunc(float(capacity) * percentage))
    return parse_quantity(text)


def hard_eviction_reservation(eviction_hard: Mapping[str, str],
                              capacity: Mapping[str, Fraction]) -> ResourceList:
    reserved: ResourceList = {}
    for signal, value in eviction_hard.items():
        resource = _SIGNAL_RESOURCE.get(signal)
        if resource is None:
            continue
        reserved[resource] = threshold_quantity(value, capacity.get(resource, Fraction(0)))
    return reserved


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
    """``NodeResources`` from the machine and the kubelet configuration."""

    def __init__(self, machine: MachineInfo, ephemeral_storage: int | None,
                 system_reserved: Mapping[str, str] | None = None,
                 kube_reserved: Mapping[str, str] | None = None,
                 eviction_hard: Mapping[str, str] | None = None) -> None:
        self._capacity = machine_capacity(machine, ephemeral_storage)
        self._system_reserved = {k: parse_quantity(v) for k, v in (system_reserved or {}).items()}
        self._kube_reserved = {k: parse_quantity(v) for k, v in (kube_reserved or {}).items()}
        self._eviction_hard = dict(eviction_hard or {})

    def capacity(self) -> ResourceList:
        return dict(self._capacity)

    def allocatable_reservation(self) -> ResourceList:
        eviction = hard_eviction_reservation(self._eviction_hard, self._capacity)
        reservation: ResourceList = {}
        for name in self._capacity:
            total = (self._system_reserved.get(name, Fraction(0))
                     + self._kube_reserved.get(name, Fraction(0))
                     + eviction.get(name, Fraction(0)))
            if total:
                reservation[name] = total
        return reservation


__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "MachineResources",
    "NodeResources",
    "ResourceList",
    "format_resources",
    "hard_eviction_reservation",
    "hugepage_resource_name",
    "is_hugepage_resource",
    "machine_capacity",
    "quantity_format",
    "threshold_quantity",
]
