"""Facts about the machine the node status reports (upstream: what cAdvisor's MachineInfo gives).

Read from the places cAdvisor reads them on Linux:

- logical CPUs online: ``/sys/devices/system/cpu/online`` (``0-3,6``);
- memory: ``MemTotal`` in ``/proc/meminfo``;
- huge pages: one ``/sys/kernel/mm/hugepages/hugepages-<size>kB`` directory per
  page size, ``nr_hugepages`` pages of it;
- ``/etc/machine-id`` (or D-Bus' copy), the DMI product UUID, and the kernel's
  boot id, which changes on every boot (a changed boot id is how the kubelet
  notices the node rebooted);
- kernel release (``uname``) and the OS' ``PRETTY_NAME`` from ``os-release``;
- the size of the filesystem holding the kubelet's root directory, which is
  the node's ``ephemeral-storage`` capacity.

A root prefix lets tests point all of it at a fake tree.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

from pykubelet.cm.helpers import HUGEPAGES_DIR, read_hugepage_sizes

MACHINE_ID_PATHS = ("etc/machine-id", "var/lib/dbus/machine-id")
SYSTEM_UUID_PATHS = ("sys/class/dmi/id/product_uuid", "proc/device-tree/system-id",
                     "proc/device-tree/vm,uuid")
OS_RELEASE_PATHS = ("etc/os-release", "usr/lib/os-release")


@dataclass(frozen=True)
class MachineInfo:
    num_cores: int
    memory_capacity: int
    # Page size in bytes -> number of pages reserved.
    hugepages: dict[int, int] = field(default_factory=dict)
    machine_id: str = ""
    system_uuid: str = ""
    boot_id: str = ""


@dataclass(frozen=True)
class VersionInfo:
    kernel_version: str
    os_image: str


def _read(root: str, relative: str) -> str | None:
    try:
        with open(os.path.join(root, relative), encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _first(root: str, candidates: tuple[str, ...]) -> str:
    for relative in candidates:
        text = _read(root, relative)
        if text is not None and text.strip("\x00\n "):
            return text.strip("\x00\n ")
    return ""


def parse_cpu_list(text: str) -> int:
    """How many CPUs a kernel CPU list names (``0-3,6`` is 5)."""
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        count += int(high) - int(low) + 1 if high else 1
    return count


def parse_meminfo_total(text: str) -> int:
    """``MemTotal`` of ``/proc/meminfo`` in bytes."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            value = int(fields[1])
            unit = fields[2].lower() if len(fields) > 2 else ""
            return value * 1024 if unit == "kb" else value
    raise ValueError("MemTotal missing from /proc/meminfo")


def parse_os_release(text: str) -> str:
    """``PRETTY_NAME`` of an os-release file (``Debian GNU/Linux 12 (bookworm)``)."""
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            value = line.partition("=")[2]
            try:
                parts = shlex.split(value)
            except ValueError:
                return value.strip('"')
            return parts[0] if parts else ""
    return "Linux"


def read_hugepages(root: str = "/") -> dict[int, int]:
    """Reserved huge pages by page size in bytes (``nr_hugepages`` of each size)."""
    pages: dict[int, int] = {}
    for size in read_hugepage_sizes(root):
        text = _read(root, os.path.join(HUGEPAGES_DIR, f"hugepages-{size // 1024}kB",
                                        "nr_hugepages"))
        pages[size] = int(text.strip()) if text else 0
    return pages


def read_machine_info(root: str = "/") -> MachineInfo:
    online = _read(root, "sys/devices/system/cpu/online")
    cores = parse_cpu_list(online) if online else (os.cpu_count() or 1)
    meminfo = _read(root, "proc/meminfo")
    if meminfo is None:
        raise OSError(f"cannot read {os.path.join(root, 'proc/meminfo')}")
    return MachineInfo(
        num_cores=cores,
        memory_capacity=parse_meminfo_total(meminfo),
        hugepages=read_hugepages(root),
        machine_id=_first(root, MACHINE_ID_PATHS),
        system_uuid=_first(root, SYSTEM_UUID_PATHS),
        boot_id=_first(root, ("proc/sys/kernel/random/boot_id",)),
    )


def read_version_info(root: str = "/") -> VersionInfo:
    os_release = _first(root, OS_RELEASE_PATHS)
    return VersionInfo(kernel_version=os.uname().release,
                       os_image=parse_os_release(os_release) if os_release else "Linux")


def filesystem_capacity(path: str) -> int:
    """Bytes of the filesystem holding ``path`` (its nearest existing ancestor)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    stats = os.statvfs(probe)
    return stats.f_blocks * stats.f_frsize


__all__ = [
    "MachineInfo",
    "VersionInfo",
    "filesystem_capacity",
    "parse_cpu_list",
    "parse_meminfo_total",
    "parse_os_release",
    "read_hugepages",
    "read_machine_info",
    "read_version_info",
]
