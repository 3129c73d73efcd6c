"""Node readings from cgroup v1/v2 and /proc files (fake trees laid out as the kernel does)."""

from __future__ import annotations

from pathlib import Path

from pykubelet.stats import node
from pykubelet.stats.provider import CPUUsageCache, format_time


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_cgroup_v1_cpu_and_memory_working_set(tmp_path: Path) -> None:
    write(tmp_path, {
        "cpuacct/cpuacct.usage": "123456789\n",
        "memory/memory.usage_in_bytes": "1000000\n",
        "memory/memory.stat": "cache 10\ntotal_inactive_file 300000\ntotal_rss 500000\n"
                              "total_pgfault 42\ntotal_pgmajfault 3\n",
        "cpuacct/kubepods/cpuacct.usage": "99\n",
    })
    assert not node.is_cgroup_v2(str(tmp_path))
    assert node.cgroup_cpu("", str(tmp_path)) == node.CPUReading(123456789)
    assert node.cgroup_cpu("kubepods", str(tmp_path)) == node.CPUReading(99)
    assert node.cgroup_memory("", str(tmp_path)) == node.MemoryReading(
        usage_bytes=1000000, working_set_bytes=700000, rss_bytes=500000, page_faults=42,
        major_page_faults=3)
    assert node.cgroup_cpu("missing", str(tmp_path)) is None


def test_cgroup_v2_files(tmp_path: Path) -> None:
    write(tmp_path, {
        "cgroup.controllers": "cpu memory\n",
        "kubepods/cpu.stat": "usage_usec 2500\nuser_usec 2000\n",
        "kubepods/memory.current": "8192\n",
        "kubepods/memory.stat": "anon 4096\ninactive_file 1024\npgfault 7\npgmajfault 1\n",
    })
    assert node.cgroup_cpu("kubepods", str(tmp_path)) == node.CPUReading(2_500_000)
    assert node.cgroup_memory("kubepods", str(tmp_path)) == node.MemoryReading(8192, 7168, 4096,
                                                                                7, 1)


def test_proc_fallbacks_and_counts(tmp_path: Path) -> None:
    proc, cgroups = tmp_path / "proc", tmp_path / "cg"
    write(proc, {
        "meminfo": "MemTotal:       16000 kB\nMemFree:        4000 kB\n"
                   "Inactive(file):  2000 kB\nAnonPages:      5000 kB\n",
        "stat": "cpu  100 0 50 1000 10 0 0 0 0 0\nbtime 1700000000\n",
        "loadavg": "0.10 0.20 0.30 3/512 4242\n",
        "sys/kernel/pid_max": "4194304\n",
        "net/dev": "Inter-|   Receive\n face |bytes\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n"
                   "  eth0: 1000 10 2 0 0 0 0 0 2000 20 3 0 0 0 0 0\n",
        "net/route": "Iface\tDestination\tGateway\neth0\t00000000\t0102A8C0\n",
    })
    memory = node.node_memory(str(proc), str(cgroups))
    assert memory is not None
    assert (memory.usage_bytes, memory.working_set_bytes) == (12_000 * 1024, 10_000 * 1024)
    assert node.memory_capacity(str(proc)) == 16000 * 1024
    assert node.node_cpu(str(proc), str(cgroups)) is not None
    assert node.boot_time(str(proc)) == 1700000000
    assert node.running_processes(str(proc)) == 512
    assert node.max_pid(str(proc)) == 4194304
    assert node.interfaces(str(proc / "net/dev")) == [
        node.InterfaceReading("eth0", 1000, 2, 2000, 3)]
    assert node.default_interface(str(proc)) == "eth0"


def test_directory_usage_counts_files_once(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "0.log").write_bytes(b"x" * 10000)
    (tmp_path / "c" / "link").symlink_to(tmp_path / "c" / "0.log")
    used, inodes = node.directory_usage(str(tmp_path))
    assert inodes == 3
    assert used >= 10000


def test_cpu_usage_cache_turns_totals_into_nano_cores() -> None:
    cache = CPUUsageCache()
    assert cache.nano_cores("c1", 1_000_000_000, 500_000_000) is None
    # 0.25 s of CPU over 0.5 s of wall clock: half a core.
    assert cache.nano_cores("c1", 1_500_000_000, 750_000_000) == 500_000_000
    assert cache.nano_cores("c1", 1_500_000_000, 800_000_000) is None  # same instant
    cache.retain(set())
    assert cache.nano_cores("c1", 2_000_000_000, 900_000_000) is None


def test_summary_times_are_rfc3339_seconds() -> None:
    assert format_time(1700000000.9) == "2023-11-14T22:13:20Z"
