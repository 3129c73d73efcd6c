"""Machine facts read from /proc and /sys, and capacity minus reservations."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from pykubelet.api.quantity import parse_quantity
from pykubelet.cm.cgroups import CgroupManager
from pykubelet.cm.manager import Capacity, ContainerManager, NodeConfig
from pykubelet.config.units import parse_eviction_thresholds
from pykubelet.nodestatus.machine import (
    MachineInfo,
    parse_cpu_list,
    parse_os_release,
    read_machine_info,
    read_version_info,
)
from pykubelet.nodestatus.resources import (
    MachineResources,
    allocatable_status,
    format_resources,
    hugepage_resource_name,
)

GIB = 1024**3


def fake_root(tmp_path: Path) -> Path:
    files = {
        "sys/devices/system/cpu/online": "0-3,6\n",
        "proc/meminfo": "MemTotal:       16331264 kB\nMemFree:  100 kB\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "8\n",
        "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
        "etc/machine-id": "0123456789abcdef\n",
        "sys/class/dmi/id/product_uuid": "EC2AB1A8-0000-1111-2222-333344445555\n",
        "proc/sys/kernel/random/boot_id": "b00t-1d\n",
        "etc/os-release": 'NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    }
    for relative, content in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return tmp_path


def test_reads_the_machine(tmp_path: Path) -> None:
    info = read_machine_info(str(fake_root(tmp_path)))
    assert info.num_cores == 5
    assert info.memory_capacity == 16331264 * 1024
    assert info.hugepages == {2 * 1024**2: 8, GIB: 0}
    assert (info.machine_id, info.boot_id) == ("0123456789abcdef", "b00t-1d")
    assert info.system_uuid == "EC2AB1A8-0000-1111-2222-333344445555"
    assert read_version_info(str(tmp_path)).os_image == "Debian GNU/Linux 12 (bookworm)"


def test_the_real_machine_has_cpus_and_memory() -> None:
    info = read_machine_info()
    assert info.num_cores >= 1
    assert info.memory_capacity > 0
    assert info.boot_id


@pytest.mark.parametrize(("text", "count"), [("0", 1), ("0-1", 2), ("0-3,6,8-9", 7)])
def test_cpu_lists(text: str, count: int) -> None:
    assert parse_cpu_list(text) == count


def test_os_release_without_pretty_name() -> None:
    assert parse_os_release('NAME="x"\n') == "Linux"


def test_allocatable_is_capacity_less_the_container_managers_reservation() -> None:
    machine = MachineInfo(num_cores=4, memory_capacity=16 * GIB, hugepages={2 * 1024**2: 512})
    hard = parse_eviction_thresholds({"memory.available": "100Mi", "nodefs.available": "10%",
                                      "imagefs.available": "15%"}, {}, {}, {})
    manager = ContainerManager(
        NodeConfig(system_reserved={"cpu": "100m", "memory": "500Mi", "pid": "100"},
                   kube_reserved={"cpu": "200m", "memory": "1Gi", "ephemeral-storage": "1Gi"},
                   hard_eviction_thresholds=hard),
        CgroupManager("cgroupfs"),
        Capacity({"cpu": Fraction(4000), "memory": Fraction(16 * GIB),
                  "ephemeral-storage": Fraction(100 * GIB)}))
    resources = MachineResources(machine, 100 * GIB, manager.allocatable_reservation)
    capacity = resources.capacity()
    assert format_resources(capacity) == {
        "cpu": "4", "memory": "16Gi", "hugepages-2Mi": "1Gi", "ephemeral-storage": "100Gi"}
    reservation = resources.allocatable_reservation()
    assert reservation["cpu"] == Fraction(3, 10)
    assert reservation["memory"] == parse_quantity("1624Mi")
    # 10% of the filesystem, computed in float32 as upstream does, plus kubeReserved.
    assert reservation["ephemeral-storage"] == GIB + int(100 * GIB * 0.10000000149011612)
    assert "pid" not in reservation
    # What a node without a status yet offers to admission: the same rule, pods included,
    # and the memory held in huge pages left out.
    allocatable = allocatable_status(resources, 7)
    assert allocatable["cpu"] == "3700m"
    assert allocatable["pods"] == "7"
    assert parse_quantity(allocatable["memory"]) == 16 * GIB - parse_quantity("1624Mi") - GIB


def test_hugepage_names() -> None:
    assert hugepage_resource_name(2 * 1024**2) == "hugepages-2Mi"
    assert hugepage_resource_name(GIB) == "hugepages-1Gi"
