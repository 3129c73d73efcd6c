"""Readings of the node itself: cgroups, ``/proc`` and filesystems (what cAdvisor gives upstream).

Each function reads a few small kernel files and returns plain numbers, or
None when the kernel does not offer the file (cgroup v1 and v2 lay their
files out differently; these machines run v1). ``proc`` and ``cgroup_root``
are parameters so that tests can point them at a fake tree.

Conventions follow cAdvisor's, which metrics-server and ``kubectl top``
were written against: the working set is usage minus inactive file pages,
available memory is capacity minus working set, CPU is cumulative
nanoseconds of core time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

PROC: Final = "/proc"
CGROUP_ROOT: Final = "/sys/fs/cgroup"


@dataclass(frozen=True)
class CPUReading:
    usage_core_nanos: int


@dataclass(frozen=True)
class MemoryReading:
    usage_bytes: int
    working_set_bytes: int
    rss_bytes: int
    page_faults: int
    major_page_faults: int


@dataclass(frozen=True)
class FsReading:
    capacity_bytes: int
    available_bytes: int
    used_bytes: int
    inodes: int
    inodes_free: int

    @property
    def inodes_used(self) -> int:
        return self.inodes - self.inodes_free


@dataclass(frozen=True)
class InterfaceReading:
    name: str
    rx_bytes: int
    rx_errors: int
    tx_bytes: int
    tx_errors: int


def _read(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def _key_values(text: str | None) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2:
            try:
                values[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return values


def is_cgroup_v2(cgroup_root: str = CGROUP_ROOT) -> bool:
    return os.path.exists(os.path.join(cgroup_root, "cgroup.controllers"))


def cgroup_cpu(cgroup: str = "", cgroup_root: str = CGROUP_ROOT) -> CPUReading | None:
    """Cumulative CPU of a cgroup (relative path, "" for the root)."""
    if is_cgroup_v2(cgroup_root):
        stat = _key_values(_read(os.path.join(cgroup_root, cgroup, "cpu.stat")))
        if "usage_usec" in stat:
            return CPUReading(stat["usage_usec"] * 1000)
        return None
    for controller in ("cpuacct", "cpu,cpuacct", "cpu"):
        usage = _read_int(os.path.join(cgroup_root, controller, cgroup, "cpuacct.usage"))
        if usage is not None:
            return CPUReading(usage)
    return None


def cgroup_memory(cgroup: str = "", cgroup_root: str = CGROUP_ROOT) -> MemoryReading | None:
    """Memory of a cgroup, cAdvisor's way (working set = usage - inactive file)."""
    if is_cgroup_v2(cgroup_root):
        base = os.path.join(cgroup_root, cgroup)
        usage = _read_int(os.path.join(base, "memory.current"))
        stat = _key_values(_read(os.path.join(base, "memory.stat")))
        if usage is None:
            return None
        inactive = stat.get("inactive_file", 0)
        return MemoryReading(usage, max(0, usage - inactive), stat.get("anon", 0),
                             stat.get("pgfault", 0), stat.get("pgmajfault", 0))
    base = os.path.join(cgroup_root, "memory", cgroup)
    usage = _read_int(os.path.join(base, "memory.usage_in_bytes"))
    if usage is None:
        return None
    stat = _key_values(_read(os.path.join(base, "memory.stat")))
    inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
    return MemoryReading(usage, max(0, usage - inactive),
                         stat.get("total_rss", stat.get("rss", 0)),
                         stat.get("total_pgfault", stat.get("pgfault", 0)),
                         stat.get("total_pgmajfault", stat.get("pgmajfault", 0)))


def memory_capacity(proc: str = PROC) -> int | None:
    """MemTotal in bytes."""
    total = _key_values(_read(os.path.join(proc, "meminfo"))).get("MemTotal")
    return total * 1024 if total is not None else None


def node_memory(proc: str = PROC, cgroup_root: str = CGROUP_ROOT) -> MemoryReading | None:
    """The root cgroup's memory; ``/proc/meminfo`` where the root has no usage file (v2)."""
    reading = cgroup_memory("", cgroup_root)
    if reading is not None:
        return reading
    info = _key_values(_read(os.path.join(proc, "meminfo")))
    if "MemTotal" not in info:
        return None
    used = (info["MemTotal"] - info.get("MemFree", 0)) * 1024
    inactive = info.get("Inactive(file)", 0) * 1024
    vmstat = _key_values(_read(os.path.join(proc, "vmstat")))
    return MemoryReading(used, max(0, used - inactive), info.get("AnonPages", 0) * 1024,
                         vmstat.get("pgfault", 0), vmstat.get("pgmajfault", 0))


def node_cpu(proc: str = PROC, cgroup_root: str = CGROUP_ROOT) -> CPUReading | None:
    """The root cgroup's CPU; the ``/proc/stat`` total where the root has none."""
    reading = cgroup_cpu("", cgroup_root)
    if reading is not None:
        return reading
    text = _read(os.path.join(proc, "stat")) or ""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(v) for v in line.split()[1:]]
            busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
            ticks = os.sysconf("SC_CLK_TCK")
            return CPUReading(busy * 1_000_000_000 // ticks)
    return None


def boot_time(proc: str = PROC) -> float | None:
    return float(_key_values(_read(os.path.join(proc, "stat"))).get("btime", 0)) or None


def num_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def interfaces(proc_net_dev: str) -> list[InterfaceReading]:
    """Interfaces of one network namespace from its ``net/dev`` (loopback left out)."""
    found: list[InterfaceReading] = []
    for line in (_read(proc_net_dev) or "").splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 11 or name.strip() == "lo":
            continue
        found.append(InterfaceReading(name.strip(), int(fields[0]), int(fields[2]),
                                      int(fields[8]), int(fields[10])))
    return found


def default_interface(proc: str = PROC) -> str | None:
    """The interface of the default route (cAdvisor's "primary" interface)."""
    for line in (_read(os.path.join(proc, "net", "route")) or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000":
            return fields[0]
    return None


def filesystem(path: str) -> FsReading | None:
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    return FsReading(capacity_bytes=info.f_blocks * info.f_frsize,
                     available_bytes=info.f_bavail * info.f_frsize,
                     used_bytes=(info.f_blocks - info.f_bfree) * info.f_frsize,
                     inodes=info.f_files, inodes_free=info.f_ffree)


def directory_usage(path: str) -> tuple[int, int]:
    """Bytes (allocated blocks) and inodes used under ``path``, not following links."""
    used = inodes = 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    inodes += 1
                    used += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return used, inodes


def max_pid(proc: str = PROC) -> int | None:
    return _read_int(os.path.join(proc, "sys", "kernel", "pid_max"))


def running_processes(proc: str = PROC) -> int | None:
    """Scheduling entities on the node (the total of ``/proc/loadavg``'s fourth field)."""
    text = _read(os.path.join(proc, "loadavg"))
    if not text:
        return None
    try:
        return int(text.split()[3].split("/")[1])
    except (IndexError, ValueError):
        return None


def process_memory(pid: int | str = "self", proc: str = PROC) -> int | None:
    """Resident set of a process in bytes."""
    rss = _key_values(_read(os.path.join(proc, str(pid), "status"))).get("VmRSS")
    return rss * 1024 if rss is not None else None


def process_cpu_nanos(pid: int | str = "self", proc: str = PROC) -> int | None:
    """User plus system CPU of a process in nanoseconds."""
    text = _read(os.path.join(proc, str(pid), "stat"))
    if not text:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        ticks = int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def process_start_time(pid: int | str = "self", proc: str = PROC) -> float | None:
    """When a process started, as a Unix time."""
    text = _read(os.path.join(proc, str(pid), "stat"))
    booted = boot_time(proc)
    if not text or booted is None:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return booted + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


__all__ = [
    "CPUReading",
    "FsReading",
    "InterfaceReading",
    "MemoryReading",
    "boot_time",
    "cgroup_cpu",
    "cgroup_memory",
    "default_interface",
    "directory_usage",
    "filesystem",
    "interfaces",
    "is_cgroup_v2",
    "max_pid",
    "memory_capacity",
    "node_cpu",
    "node_memory",
    "num_cores",
    "process_cpu_nanos",
    "process_memory",
    "process_start_time",
    "running_processes",
]
