"""cgroups on the node's filesystem: names per driver, v1 and v2 file formats, create/remove.

A cgroup is named driver-neutrally as a tuple of components
(``("kubepods", "burstable", "pod<uid>")``, upstream ``CgroupName``). The
driver turns that into a path:

- ``cgroupfs``: ``/kubepods/burstable/pod<uid>``;
- ``systemd``: every component has ``-`` escaped to ``_`` and the name becomes
  a chain of slices, ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid>.slice``.

pykubelet writes the cgroup filesystem itself for both drivers. With the
systemd driver this is systemd's naming over cgroupfs: correct where no
systemd manages the hierarchy (these machines); on a host where systemd runs,
the start-up log says so, because systemd is not told about these slices.

The hierarchy comes in two layouts, detected from ``/sys/fs/cgroup``:

- v1: one mount per controller (``cpu``, ``cpuacct``, ``memory``, ``pids``,
  ``cpuset``...); a cgroup is a directory of the same relative path in each;
  limits are ``cpu.shares``, ``cpu.cfs_quota_us``/``cpu.cfs_period_us``,
  ``memory.limit_in_bytes``, ``pids.max``;
- v2 (unified): one tree; controllers are enabled for children through the
  parent's ``cgroup.subtree_control``; limits are ``cpu.weight``,
  ``cpu.max`` (``"<quota|max> <period>"``), ``memory.max``, ``pids.max``.

The file formats are pure functions (``v1_files``/``v2_files``) so both are
unit-tested on any host; ``CgroupManager`` applies them.

Creating and removing are not symmetric. pykubelet creates a cgroup only in
the controllers it limits or reads, but the runtime (runc) places each
container in every mounted hierarchy, so the pod's directory appears below
``devices``, ``freezer``, ``name=systemd`` and, on a hybrid host, the unified
v2 tree too. Removal therefore goes over every cgroup hierarchy mounted under
``/sys/fs/cgroup`` (read from ``/proc/self/mountinfo``), as upstream's
``cgroupManagerImpl.Destroy`` does with the mount points of all subsystems
(``getCgroupSubsystemsV1``, ``GetCgroupMounts(all=true)``); otherwise every
pod leaves an empty cgroup in each hierarchy it never wrote to. Listing the
pod cgroups below a QoS cgroup looks in every hierarchy for the same reason
(upstream ``GetAllPodsFromCgroups``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass

from pykubelet.cm.helpers import ResourceConfig, cpu_shares_to_weight

CGROUP_MOUNT = "/sys/fs/cgroup"
CGROUP_DRIVER_CGROUPFS = "cgroupfs"
CGROUP_DRIVER_SYSTEMD = "systemd"
SYSTEMD_SLICE_SUFFIX = ".slice"
V1 = 1
V2 = 2
# The v1 controllers a kubelet cgroup is created in (the ones it limits or
# reads, plus cpuset so that runc finds a populated parent).
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "blkio")
V2_CONTROLLERS = ("cpu", "memory", "pids", "cpuset", "hugetlb", "io")
CGROUP2_SUPER_MAGIC_NAME = "cgroup2fs"
MOUNTINFO = "/proc/self/mountinfo"
CGROUP_FSTYPES = ("cgroup", "cgroup2")

CgroupName = tuple[str, ...]


class CgroupError(Exception):
    """A cgroup could not be created, updated or removed; the message names the path."""


# --- names ---------------------------------------------------------------------------------------

def parse_cgroupfs_name(path: str) -> CgroupName:
    """``/a/b`` as components; ``/`` and ``""`` are the root, ``()``."""
    return tuple(part for part in path.split("/") if part)


def parse_systemd_name(path: str) -> CgroupName:
    """``/a.slice/a-b.slice`` (or just ``a-b.slice``) back to ``("a", "b")``."""
    base = os.path.basename(path.rstrip("/"))
    if not base or base == "-.slice":
        return ()
    base = base.removesuffix(SYSTEMD_SLICE_SUFFIX)
    return tuple(part.replace("_", "-") for part in base.split("-"))


def to_cgroupfs(name: CgroupName) -> str:
    return "/" + "/".join(name)


def _escape_systemd(part: str) -> str:
    return part.replace("-", "_")


def to_systemd(name: CgroupName) -> str:
    """The slice path systemd would give ``name`` (upstream ``ToSystemd``/``ExpandSlice``)."""
    if not name:
        return "/"
    escaped = [_escape_systemd(part) for part in name]
    slices = ["-".join(escaped[:index + 1]) + SYSTEMD_SLICE_SUFFIX
              for index in range(len(escaped))]
    return "/" + "/".join(slices)


def driver_path(name: CgroupName, driver: str) -> str:
    return to_systemd(name) if driver == CGROUP_DRIVER_SYSTEMD else to_cgroupfs(name)


# --- file formats --------------------------------------------------------------------------------

def v1_files(config: ResourceConfig) -> dict[tuple[str, str], str]:
    """``{(controller, file): content}`` for a cgroup v1 hierarchy.

    The period is written before the quota: the kernel rejects a quota
    shorter than 1 ms of the current period.
    """
    files: dict[tuple[str, str], str] = {}
    if config.cpu_shares is not None:
        files[("cpu", "cpu.shares")] = str(config.cpu_shares)
    if config.cpu_period is not None:
        files[("cpu", "cpu.cfs_period_us")] = str(config.cpu_period)
    if config.cpu_quota is not None:
        files[("cpu", "cpu.cfs_quota_us")] = str(config.cpu_quota if config.cpu_quota > 0 else -1)
    if config.memory is not None:
        files[("memory", "memory.limit_in_bytes")] = str(
            config.memory if config.memory > 0 else -1)
    if config.pids_limit is not None:
        files[("pids", "pids.max")] = str(config.pids_limit) if config.pids_limit > 0 else "max"
    return files


def v2_files(config: ResourceConfig) -> dict[str, str]:
    """``{file: content}`` for the unified hierarchy."""
    files: dict[str, str] = {}
    if config.cpu_shares is not None:
        files["cpu.weight"] = str(cpu_shares_to_weight(config.cpu_shares))
    if config.cpu_quota is not None or config.cpu_period is not None:
        period = config.cpu_period or 100_000
        quota = config.cpu_quota if config.cpu_quota is not None and config.cpu_quota > 0 else None
        files["cpu.max"] = f"{quota if quota is not None else 'max'} {period}"
    if config.memory is not None:
        files["memory.max"] = str(config.memory) if config.memory > 0 else "max"
    if config.pids_limit is not None:
        files["pids.max"] = str(config.pids_limit) if config.pids_limit > 0 else "max"
    return files


def parse_v2_cpu_max(text: str) -> tuple[int, int]:
    """``"max 100000"`` -> (-1, 100000); ``"50000 100000"`` -> (50000, 100000)."""
    quota, _, period = text.strip().partition(" ")
    return (-1 if quota == "max" else int(quota)), int(period or 100_000)


def parse_flat_keyed(text: str) -> dict[str, int]:
    """``memory.stat``/``cpu.stat`` style ``key value`` lines."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    return values


# --- detection -----------------------------------------------------------------------------------

def detect_version(mount: str = CGROUP_MOUNT) -> int:
    """V2 when ``mount`` is a cgroup2 filesystem (has ``cgroup.controllers``), else V1."""
    if os.path.exists(os.path.join(mount, "cgroup.controllers")):
        return V2
    return V1


def mounted_hierarchies(mountinfo: str, mount: str = CGROUP_MOUNT) -> list[str]:
    """Mount points of the cgroup hierarchies (v1 and v2) at or below ``mount``, from the text
    of ``/proc/<pid>/mountinfo``: one per hierarchy (a co-mount such as ``cpu,cpuacct``
    and a second bind mount of a hierarchy are one), sorted."""
    top = mount.rstrip("/") or "/"
    by_device: dict[str, str] = {}
    for line in mountinfo.splitlines():
        fields, separator, rest = line.partition(" - ")
        before, after = fields.split(), rest.split()
        if not separator or len(before) < 5 or not after or after[0] not in CGROUP_FSTYPES:
            continue
        point = _unescape_mountinfo(before[4])
        if point != top and not point.startswith(top.rstrip("/") + "/"):
            continue
        device = before[2]
        if device not in by_device or len(point) < len(by_device[device]):
            by_device[device] = point
    return sorted(by_device.values())


def _unescape_mountinfo(field: str) -> str:
    # The kernel writes space, tab, newline and backslash in paths as octal escapes.
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


def systemd_running() -> bool:
    """systemd is PID 1 and manages the hierarchy (sd_booted's test)."""
    return os.path.isdir("/run/systemd/system")


# --- the manager ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryStats:
    usage: int
    working_set: int


class CgroupManager:
    """Creates, limits, reads and removes cgroups through one driver's naming.

    Blocking filesystem work: callers in the event loop run it in a thread.
    """

    def __init__(self, driver: str = CGROUP_DRIVER_CGROUPFS, mount: str = CGROUP_MOUNT,
                 version: int | None = None, *,
                 mountinfo: str = MOUNTINFO,  # tests only: a file standing for mountinfo
                 ) -> None:
        self.driver = driver
        self.mount = mount
        self.version = version if version is not None else detect_version(mount)
        if self.version == V1:
            self.controllers = tuple(c for c in V1_CONTROLLERS
                                     if os.path.isdir(os.path.join(mount, c)))
        else:
            self.controllers = V2_CONTROLLERS
        try:
            with open(mountinfo, encoding="utf-8") as handle:
                self.hierarchies = mounted_hierarchies(handle.read(), mount)
        except OSError:
            self.hierarchies = []
        if not self.hierarchies:
            # Nothing mounted there (a directory standing in for the mount): the
            # hierarchies are the ones this manager writes to.
            self.hierarchies = sorted({path.rstrip("/") or "/"
                                       for path in self.paths(()).values()})

    # names
    def name(self, cgroup: CgroupName) -> str:
        """The driver's literal name (what CRI gets as a cgroup parent)."""
        return driver_path(cgroup, self.driver)

    def paths(self, cgroup: CgroupName) -> dict[str, str]:
        """Absolute directory per controller (v2: one directory under the key ``""``)."""
        relative = self.name(cgroup).lstrip("/")
        if self.version == V2:
            return {"": os.path.join(self.mount, relative)}
        return {c: os.path.join(self.mount, c, relative) for c in self.controllers}

    def all_paths(self, cgroup: CgroupName) -> list[str]:
        """The cgroup's directory in every mounted hierarchy, written to or not."""
        relative = self.name(cgroup).lstrip("/")
        return [os.path.join(hierarchy, relative) if relative else hierarchy
                for hierarchy in self.hierarchies]

    def _dir(self, cgroup: CgroupName, controller: str) -> str:
        paths = self.paths(cgroup)
        return paths[""] if self.version == V2 else paths[controller]

    def exists(self, cgroup: CgroupName) -> bool:
        """Present in every controller the kubelet relies on."""
        required = ("cpu", "memory", "pids") if self.version == V1 else ("",)
        paths = self.paths(cgroup)
        return all(os.path.isdir(paths[c]) for c in required if c in paths)

    def missing_paths(self, cgroup: CgroupName) -> list[str]:
        required = ("cpu", "memory", "pids") if self.version == V1 else ("",)
        paths = self.paths(cgroup)
        return [paths[c] for c in required if c in paths and not os.path.isdir(paths[c])]

    # create / update
    def create(self, cgroup: CgroupName, config: ResourceConfig | None = None) -> None:
        try:
            if self.version == V1:
                for controller, path in self.paths(cgroup).items():
                    if controller == "cpuset":
                        self._make_cpuset(path)
                    else:
                        os.makedirs(path, exist_ok=True)
            else:
                self._make_v2(cgroup)
        except OSError as err:
            raise CgroupError(f"failed to create cgroup {self.name(cgroup)}: {err}") from err
        if config is not None:
            self.update(cgroup, config)

    def _make_cpuset(self, path: str) -> None:
        # A v1 cpuset without cpus and mems cannot hold tasks: fill each new
        # level from its parent, as runc does for the cgroups it creates.
        missing: list[str] = []
        current = path
        root = os.path.join(self.mount, "cpuset")
        while current != root and not os.path.isdir(current):
            missing.append(current)
            current = os.path.dirname(current)
        for directory in reversed(missing):
            os.makedirs(directory, exist_ok=True)
            parent = os.path.dirname(directory)
            for name in ("cpuset.cpus", "cpuset.mems"):
                target = os.path.join(directory, name)
                if _read(target).strip():
                    continue
                with contextlib.suppress(OSError):
                    _write(target, _read(os.path.join(parent, name)).strip())

    def _make_v2(self, cgroup: CgroupName) -> None:
        # Enable the controllers for children at every level from the root down.
        current = self.mount
        wanted = " ".join(f"+{c}" for c in ("cpu", "memory", "pids"))
        for part in self.name(cgroup).strip("/").split("/"):
            if not part:
                continue
            with contextlib.suppress(OSError):
                _write(os.path.join(current, "cgroup.subtree_control"), wanted)
            current = os.path.join(current, part)
            os.makedirs(current, exist_ok=True)

    def update(self, cgroup: CgroupName, config: ResourceConfig) -> None:
        where = self.name(cgroup)
        try:
            if self.version == V1:
                for (controller, filename), content in v1_files(config).items():
                    if controller not in self.controllers:
                        continue
                    _write(os.path.join(self._dir(cgroup, controller), filename), content)
            else:
                for filename, content in v2_files(config).items():
                    _write(os.path.join(self._dir(cgroup, ""), filename), content)
        except OSError as err:
            raise CgroupError(f"failed to set limits on cgroup {where}: {err}") from err

    # read
    def read(self, cgroup: CgroupName, controller: str, filename: str) -> str:
        return _read(os.path.join(self._dir(cgroup, controller), filename))

    def memory_stats(self, cgroup: CgroupName) -> MemoryStats:
        """Usage and working set (usage minus inactive file pages), as cAdvisor computes it."""
        if self.version == V1:
            usage = int(self.read(cgroup, "memory", "memory.usage_in_bytes"))
            stats = parse_flat_keyed(self.read(cgroup, "memory", "memory.stat"))
            inactive = stats.get("total_inactive_file", 0)
        else:
            usage = int(self.read(cgroup, "memory", "memory.current"))
            stats = parse_flat_keyed(self.read(cgroup, "memory", "memory.stat"))
            inactive = stats.get("inactive_file", 0)
        return MemoryStats(usage=usage, working_set=max(0, usage - inactive))

    def pids_current(self, cgroup: CgroupName) -> int:
        try:
            return int(self.read(cgroup, "pids", "pids.current"))
        except (OSError, ValueError):
            return len(self.pids(cgroup))

    def pids(self, cgroup: CgroupName) -> list[int]:
        """Every process in the cgroup and its descendants."""
        return _pids_below(self._dir(cgroup, "pids" if self.version == V1 else ""))

    def children(self, cgroup: CgroupName) -> list[str]:
        """Names of the directories directly below ``cgroup`` (as the driver wrote them) in
        any hierarchy: a child left only where the runtime made it is still a child."""
        found: set[str] = set()
        for top in self.all_paths(cgroup):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                found.update(entry.name for entry in os.scandir(top) if entry.is_dir())
        return sorted(found)

    # remove
    def destroy(self, cgroup: CgroupName, kill_timeout: float = 5.0) -> None:
        """Kill what still runs inside, then remove the cgroup (deepest first) from every
        mounted hierarchy."""
        paths = self.all_paths(cgroup)
        deadline = time.monotonic() + kill_timeout
        while True:
            pids = sorted({pid for path in paths for pid in _pids_below(path)})
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise CgroupError(f"failed to destroy cgroup {self.name(cgroup)}: "
                                  f"processes {pids[:5]} did not exit")
            time.sleep(0.05)
        errors: list[CgroupError] = []
        for path in paths:
            try:
                _remove_tree(path)
            except CgroupError as err:
                errors.append(err)  # the other hierarchies are still cleaned
        if errors:
            raise errors[0]


def _pids_below(top: str) -> list[int]:
    found: list[int] = []
    for directory, _, _ in os.walk(top):
        with contextlib.suppress(OSError, ValueError):
            found.extend(int(p) for p in _read(os.path.join(directory, "cgroup.procs")).split())
    return found


def _remove_tree(path: str) -> None:
    if not os.path.isdir(path):
        return
    # cgroup directories hold only kernel files: remove child directories
    # bottom-up with rmdir; the files go with them.
    for directory, subdirs, _ in sorted(os.walk(path, topdown=False), key=lambda w: -len(w[0])):
        del subdirs
        for attempt in range(20):
            try:
                os.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError as err:
                # EBUSY while the last task is being reaped: retry briefly.
                if err.errno != errno.EBUSY or attempt == 19:
                    raise CgroupError(f"failed to remove cgroup {directory}: {err}") from err
                time.sleep(0.05)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read()


def _write(path: str, content: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(content)


__all__ = [
    "CGROUP_DRIVER_CGROUPFS",
    "CGROUP_DRIVER_SYSTEMD",
    "V1",
    "V2",
    "CgroupError",
    "CgroupManager",
    "CgroupName",
    "MemoryStats",
    "detect_version",
    "driver_path",
    "mounted_hierarchies",
    "parse_cgroupfs_name",
    "parse_systemd_name",
    "parse_v2_cpu_max",
    "systemd_running",
    "to_cgroupfs",
    "to_systemd",
    "v1_files",
    "v2_files",
]
