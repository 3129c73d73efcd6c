"""The machine's CPUs as upstream's cpumanager sees them, and how it picks some.

Upstream builds its ``CPUTopology`` from cadvisor's machine info, which reads
``/sys/devices/system/cpu/cpuN/topology`` (``core_id``, ``physical_package_id``)
for every online CPU and the NUMA node each belongs to from
``/sys/devices/system/node/nodeN`` (a kernel without NUMA has no such directory,
and cadvisor then counts each socket as a node); ``discover`` reads the same files,
under a root that tests point at a fake machine. The kubelet reads the machine once,
at start, and hands the value to the CPU manager (the static policy's CPUs) and the
topology manager (its NUMA nodes, what every hint is made of).

``take_by_topology`` is upstream's packed ``takeByTopology`` (``cpu_assignment.go``)
for machines with one NUMA node per socket: whole free sockets first, then whole
free cores, then single CPUs from the fullest cores, so that exclusive CPUs share as
few cores with others as possible. On a single-socket machine without SMT it takes
the lowest free ids.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pykubelet.cm.cpumanager import cpuset
from pykubelet.cm.cpumanager.cpuset import CPUSet

SYS_CPU_DIR = "sys/devices/system/cpu"
SYS_NODE_DIR = "sys/devices/system/node"


class TopologyError(Exception):
    """The machine's CPUs cannot be read, or a request cannot be met."""


@dataclass(frozen=True)
class CPUInfo:
    cpu: int
    core: int  # unique across sockets: (socket, core_id) numbered in order
    socket: int
    numa_node: int = 0


@dataclass(frozen=True)
class CPUTopology:
    cpus: tuple[CPUInfo, ...]

    def all_cpus(self) -> CPUSet:
        return frozenset(info.cpu for info in self.cpus)

    def _cpus_where(self, key: Callable[[CPUInfo], int], value: int) -> CPUSet:
        return frozenset(info.cpu for info in self.cpus if key(info) == value)

    def core_cpus(self, core: int) -> CPUSet:
        return self._cpus_where(lambda info: info.core, core)

    def socket_cpus(self, socket: int) -> CPUSet:
        return self._cpus_where(lambda info: info.socket, socket)

    def numa_nodes(self) -> list[int]:
        return sorted({info.numa_node for info in self.cpus})

    def numa_node_cpus(self, nodes: Iterable[int]) -> CPUSet:
        wanted = set(nodes)
        return frozenset(info.cpu for info in self.cpus if info.numa_node in wanted)

    def info(self, cpu: int) -> CPUInfo:
        return next(info for info in self.cpus if info.cpu == cpu)


def discover(host_root: str = "/") -> CPUTopology:
    """The online CPUs with their core, socket and NUMA node, from ``<host_root>/sys``.

    ``host_root`` is "/" on a node; tests give a fake machine's tree."""
    sys_cpu_dir = os.path.join(host_root, SYS_CPU_DIR)
    sys_node_dir = os.path.join(host_root, SYS_NODE_DIR)
    try:
        numa = _numa_nodes_of_cpus(sys_node_dir)
        with open(os.path.join(sys_cpu_dir, "online"), encoding="ascii") as f:
            online = cpuset.parse(f.read().strip())
        raw: list[tuple[int, int, int]] = []
        for cpu in sorted(online):
            topo = os.path.join(sys_cpu_dir, f"cpu{cpu}", "topology")
            raw.append((cpu, _read_int(os.path.join(topo, "physical_package_id")),
                        _read_int(os.path.join(topo, "core_id"))))
    except (OSError, ValueError) as err:
        raise TopologyError(f"could not detect number of cpus: {err}") from err
    cores: dict[tuple[int, int], int] = {}
    infos = []
    for cpu, socket, core_id in raw:
        core = cores.setdefault((socket, core_id), len(cores))
        infos.append(CPUInfo(cpu=cpu, core=core, socket=socket,
                             numa_node=numa.get(cpu, socket)))
    return CPUTopology(tuple(infos))


def _numa_nodes_of_cpus(sys_node_dir: str) -> dict[int, int]:
    """CPU -> NUMA node from each ``nodeN/cpulist``; empty without NUMA support."""
    try:
        entries = os.listdir(sys_node_dir)
    except FileNotFoundError:
        return {}
    found: dict[int, int] = {}
    for entry in entries:
        number = entry.removeprefix("node")
        if entry.startswith("node") and number.isdigit():
            with open(os.path.join(sys_node_dir, entry, "cpulist"), encoding="ascii") as f:
                for cpu in cpuset.parse(f.read().strip()):
                    found[cpu] = int(number)
    return found


def _read_int(path: str) -> int:
    with open(path, encoding="ascii") as f:
        return int(f.read().strip())


def take_by_topology(topology: CPUTopology, available: CPUSet, count: int) -> CPUSet:
    """``count`` CPUs out of ``available``, packed onto as few sockets and cores as can be."""
    if count == 0:
        return frozenset()
    if len(available) < count:
        raise TopologyError(f"not enough cpus available to satisfy request: "
                            f"requested={count}, available={len(available)}")
    free = set(available)
    taken: set[int] = set()

    def take(cpus: CPUSet) -> None:
        taken.update(cpus)
        free.difference_update(cpus)

    def needed() -> int:
        return count - len(taken)

    sockets = sorted({info.socket for info in topology.cpus})
    for socket in sockets:
        cpus = topology.socket_cpus(socket)
        if cpus <= free and 0 < len(cpus) <= needed():
            take(cpus)
    cores = sorted({info.core for info in topology.cpus if info.cpu in free},
                   key=lambda core: (len(free & topology.socket_cpus(
                       topology.info(min(topology.core_cpus(core))).socket)), core))
    for core in cores:
        cpus = topology.core_cpus(core)
        if cpus <= free and len(cpus) <= needed():
            take(cpus)

    def fullness(cpu: int) -> tuple[int, int, int]:
        info = topology.info(cpu)
        return (len(free & topology.core_cpus(info.core)),
                len(free & topology.socket_cpus(info.socket)), cpu)

    while needed() > 0:
        take(frozenset({min(free, key=fullness)}))
    return frozenset(taken)
