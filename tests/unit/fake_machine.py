"""A fake machine's sysfs and procfs under a directory, for tests that read "the host".

``write_fake_machine`` writes what ``cpumanager.topology.discover`` reads
(``sys/devices/system/cpu/online``, each CPU's ``topology/core_id`` and
``topology/physical_package_id``, each ``sys/devices/system/node/nodeN/cpulist``)
and what ``nodestatus.machine.read_machine_info`` needs (``proc/meminfo`` and the
boot id), so one root gives the whole kubelet, say, a two-NUMA-node machine.

The layout is built from the NUMA nodes: each node's CPUs, in the order given,
are grouped ``threads_per_core`` at a time into cores; each node is its own socket
unless ``sockets`` says otherwise; core ids count from 0 within each socket, as
the kernel numbers them.
"""

from __future__ import annotations

from pathlib import Path

from pykubelet.cm.cpumanager import cpuset

GIB = 1024 ** 3


def write_fake_machine(root: Path, *, numa_nodes: dict[int, list[int]],
                       threads_per_core: int = 1, sockets: dict[int, int] | None = None,
                       with_numa_dirs: bool = True, memory_bytes: int = 8 * GIB,
                       boot_id: str = "fake-boot-id") -> Path:
    """Write the machine under ``root`` and return ``root``.

    ``numa_nodes`` maps a node id to its CPU ids; ``sockets`` a node id to its socket
    (default: the node's own id). ``with_numa_dirs=False`` is a kernel without NUMA
    support: no ``sys/devices/system/node`` at all.
    """
    cpu_dir = root / "sys/devices/system/cpu"
    node_dir = root / "sys/devices/system/node"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    every_cpu: list[int] = []
    next_core: dict[int, int] = {}  # socket -> next core id
    for node, cpus in sorted(numa_nodes.items()):
        socket = (sockets or {}).get(node, node)
        for first in range(0, len(cpus), threads_per_core):
            core_id = next_core.get(socket, 0)
            next_core[socket] = core_id + 1
            for cpu in cpus[first:first + threads_per_core]:
                topology = cpu_dir / f"cpu{cpu}" / "topology"
                topology.mkdir(parents=True, exist_ok=True)
                (topology / "core_id").write_text(f"{core_id}\n")
                (topology / "physical_package_id").write_text(f"{socket}\n")
        every_cpu.extend(cpus)
        if with_numa_dirs:
            (node_dir / f"node{node}").mkdir(parents=True, exist_ok=True)
            (node_dir / f"node{node}" / "cpulist").write_text(f"{cpuset.format(cpus)}\n")
    (cpu_dir / "online").write_text(f"{cpuset.format(every_cpu)}\n")
    if with_numa_dirs:
        (node_dir / "online").write_text(f"{cpuset.format(numa_nodes)}\n")
    proc = root / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text(f"MemTotal:       {memory_bytes // 1024} kB\n"
                                  f"MemFree:        {memory_bytes // 2048} kB\n")
    (proc / "sys/kernel/random/boot_id").write_text(f"{boot_id}\n")
    return root
