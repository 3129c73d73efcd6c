"""The summary API: ``/stats/summary`` and what ``/metrics/resource`` is built from.

metrics-server, ``kubectl top``, the HorizontalPodAutoscaler and the eviction
manager all read resource usage in the shape of upstream's
``stats/v1alpha1.Summary``: node CPU, memory, network, filesystems and
process counts, and for each running pod its containers' CPU, memory,
writable layer (``rootfs``) and logs, plus the pod's network and
ephemeral storage. The figures come from where upstream's CRI stats
provider takes them:

* containers: CRI ``ListContainerStats`` (CPU, memory, writable layer);
  the log usage from the container's log directory;
* pods: CRI ``ListPodSandboxStats`` when the runtime can give it (it needs
  the pod's cgroup), else the sum of the pod's containers; the network from
  the sandbox's network namespace (``/proc/<sandbox pid>/net/dev``);
* the node: the root cgroup and ``/proc`` (``pykubelet.stats.node``), the
  kubelet's root directory for ``fs``, CRI ``ImageFsInfo`` for the image
  filesystem.

Instantaneous CPU (``usageNanoCores``) is derived from two cumulative
readings, as upstream's CPU usage cache does: the first summary after a
container starts has none.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from cri_api.v1 import api_pb2

from pykubelet.api.kubetypes import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
)
from pykubelet.kuberuntime.logs import pod_logs_directory
from pykubelet.stats import node as nodestats
from pykubelet.util import klog

# After a failed ListPodSandboxStats (pods without a cgroup), ask again this much later.
_SANDBOX_STATS_RETRY: Final = 300.0


class StatsRuntime(Protocol):
    async def list_pod_sandboxes(
            self, filter: api_pb2.PodSandboxFilter | None = None) -> list[api_pb2.PodSandbox]: ...

    async def list_containers(
            self, filter: api_pb2.ContainerFilter | None = None) -> list[api_pb2.Container]: ...

    async def list_container_stats(
            self, filter: api_pb2.ContainerStatsFilter | None = None,
    ) -> list[api_pb2.ContainerStats]: ...

    async def list_pod_sandbox_stats(
            self, filter: api_pb2.PodSandboxStatsFilter | None = None,
    ) -> list[api_pb2.PodSandboxStats]: ...

    async def pod_sandbox_status(self, sandbox_id: str,
                                 verbose: bool = False) -> api_pb2.PodSandboxStatusResponse: ...


class StatsImages(Protocol):
    async def image_fs_info(self) -> api_pb2.ImageFsInfoResponse: ...


def format_time(seconds: float) -> str:
    """A ``metav1.Time`` in JSON: RFC 3339, whole seconds, UTC."""
    return _format_whole_seconds(int(seconds))


@functools.lru_cache(maxsize=4096)
def _format_whole_seconds(seconds: int) -> str:
    # A summary writes the same few instants hundreds of times.
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _value(holder: Any) -> int | None:
    """The value of a CRI ``UInt64Value`` field, None when the runtime left it unset."""
    return int(holder.value) if holder is not None else None


@dataclass
class _CPUSample:
    timestamp_ns: int
    usage_ns: int


class CPUUsageCache:
    """Turns cumulative CPU readings into nano-cores, one entry per container/pod/node."""

    def __init__(self) -> None:
        self._samples: dict[str, _CPUSample] = {}

    def nano_cores(self, key: str, timestamp_ns: int, usage_ns: int) -> int | None:
        previous = self._samples.get(key)
        if previous is None or timestamp_ns > previous.timestamp_ns:
            self._samples[key] = _CPUSample(timestamp_ns, usage_ns)
        if previous is None or timestamp_ns <= previous.timestamp_ns \
                or usage_ns < previous.usage_ns:
            return None
        return (usage_ns - previous.usage_ns) * 1_000_000_000 // (
            timestamp_ns - previous.timestamp_ns)

    def retain(self, keys: set[str]) -> None:
        for key in list(self._samples):
            if key not in keys:
                del self._samples[key]


def _fs_stats(time_text: str, fs: nodestats.FsReading | None, used: int | None = None,
              inodes_used: int | None = None) -> dict[str, Any]:
    stats: dict[str, Any] = {"time": time_text}
    if fs is not None:
        stats.update(availableBytes=fs.available_bytes, capacityBytes=fs.capacity_bytes,
                     inodesFree=fs.inodes_free, inodes=fs.inodes)
    if used is not None:
        stats["usedBytes"] = used
    elif fs is not None:
        stats["usedBytes"] = fs.used_bytes
    if inodes_used is not None:
        stats["inodesUsed"] = inodes_used
    elif fs is not None:
        stats["inodesUsed"] = fs.inodes_used
    return stats


def _network(time_text: str, readings: list[nodestats.InterfaceReading],
             primary: str | None) -> dict[str, Any] | None:
    if not readings:
        return None
    interfaces = [{"name": r.name, "rxBytes": r.rx_bytes, "rxErrors": r.rx_errors,
                   "txBytes": r.tx_bytes, "txErrors": r.tx_errors} for r in readings]
    chosen = next((i for i in interfaces if i["name"] == primary), interfaces[0])
    return {"time": time_text, **chosen, "interfaces": interfaces}


class StatsProvider:
    """Builds the summary from CRI and the node (upstream's CRI stats provider + cAdvisor)."""

    def __init__(self, runtime: StatsRuntime, images: StatsImages, node_name: str,
                 root_dir: str, pod_logs_dir: str, *, proc: str = nodestats.PROC,
                 cgroup_root: str = nodestats.CGROUP_ROOT,
                 volume_stats: Callable[[str], list[dict[str, Any]]] = lambda uid: [],
                 clock: Callable[[], float] = time.time) -> None:
        self._runtime = runtime
        self._images = images
        self.node_name = node_name
        self._root_dir = root_dir
        self._pod_logs_dir = pod_logs_dir
        self._proc = proc
        self._cgroup_root = cgroup_root
        self._clock = clock
        # A pod UID -> its volumes' last measurement (the volume manager's, every
        # volumeStatsAggPeriod).
        self._volume_stats = volume_stats
        self._cpu = CPUUsageCache()
        self._sandbox_pids: dict[str, int] = {}
        self._sandbox_stats_unsupported_logged = False
        self._sandbox_stats_retry_at = 0.0
        self._kubelet_started = nodestats.process_start_time("self", proc) or clock()

    # -- the node -----------------------------------------------------------------------

    def machine_info(self) -> dict[str, Any]:
        """``/spec/``: what cAdvisor's ``MachineInfo`` tells about the node."""
        boot_id = ""
        try:
            with open(os.path.join(self._proc, "sys", "kernel", "random", "boot_id")) as f:
                boot_id = f.read().strip()
        except OSError:
            pass
        machine_id = ""
        for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
            try:
                with open(path) as f:
                    machine_id = f.read().strip()
                break
            except OSError:
                continue
        return {"num_cores": nodestats.num_cores(), "machine_id": machine_id,
                "boot_id": boot_id, "memory_capacity": nodestats.memory_capacity(self._proc) or 0,
                "timestamp": datetime.now(UTC).isoformat()}

    def _cpu_stats(self, key: str, timestamp_ns: int, usage_ns: int | None) -> dict[str, Any]:
        stats: dict[str, Any] = {"time": format_time(timestamp_ns / 1e9)}
        if usage_ns is not None:
            stats["usageCoreNanoSeconds"] = usage_ns
            cores = self._cpu.nano_cores(key, timestamp_ns, usage_ns)
            if cores is not None:
                stats["usageNanoCores"] = cores
        return stats

    def _memory_stats(self, time_text: str, reading: nodestats.MemoryReading | None,
                      capacity: int | None) -> dict[str, Any]:
        stats: dict[str, Any] = {"time": time_text}
        if reading is None:
            return stats
        if capacity is not None:
            stats["availableBytes"] = max(0, capacity - reading.working_set_bytes)
        stats.update(usageBytes=reading.usage_bytes, workingSetBytes=reading.working_set_bytes,
                     rssBytes=reading.rss_bytes, pageFaults=reading.page_faults,
                     majorPageFaults=reading.major_page_faults)
        return stats

    def _node_stats(self, now: float, image_fs: api_pb2.ImageFsInfoResponse | None,
                    pods: list[dict[str, Any]], only_cpu_and_memory: bool) -> dict[str, Any]:
        now_ns = int(now * 1e9)
        stamp = format_time(now)
        capacity = nodestats.memory_capacity(self._proc)
        cpu = nodestats.node_cpu(self._proc, self._cgroup_root)
        memory = nodestats.node_memory(self._proc, self._cgroup_root)
        stats: dict[str, Any] = {
            "nodeName": self.node_name,
            "systemContainers": self._system_containers(now, pods),
            "startTime": format_time(nodestats.boot_time(self._proc) or now),
            "cpu": self._cpu_stats("node", now_ns, cpu.usage_core_nanos if cpu else None),
            "memory": self._memory_stats(stamp, memory, capacity),
        }
        if only_cpu_and_memory:
            return stats
        network = _network(stamp, nodestats.interfaces(os.path.join(self._proc, "net", "dev")),
                           nodestats.default_interface(self._proc))
        if network is not None:
            stats["network"] = network
        stats["fs"] = _fs_stats(stamp, nodestats.filesystem(self._root_dir))
        runtime: dict[str, Any] = {}
        for usage in (image_fs.image_filesystems if image_fs else []):
            fs = nodestats.filesystem(usage.fs_id.mountpoint) if usage.fs_id.mountpoint else None
            runtime["imageFs"] = _fs_stats(format_time(usage.timestamp / 1e9) if usage.timestamp
                                           else stamp, fs, _value(usage.used_bytes),
                                           _value(usage.inodes_used))
            runtime["containerFs"] = runtime["imageFs"]
            break
        if runtime:
            stats["runtime"] = runtime
        rlimit: dict[str, Any] = {"time": stamp}
        if (maxpid := nodestats.max_pid(self._proc)) is not None:
            rlimit["maxpid"] = maxpid
        if (curproc := nodestats.running_processes(self._proc)) is not None:
            rlimit["curproc"] = curproc
        stats["rlimit"] = rlimit
        return stats

    def _system_containers(self, now: float, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stamp = format_time(now)
        now_ns = int(now * 1e9)
        rss = nodestats.process_memory("self", self._proc)
        kubelet_cpu = nodestats.process_cpu_nanos("self", self._proc)
        kubelet: dict[str, Any] = {
            "name": "kubelet", "startTime": format_time(self._kubelet_started),
            "cpu": self._cpu_stats("system/kubelet", now_ns, kubelet_cpu),
            "memory": ({"time": stamp, "usageBytes": rss, "workingSetBytes": rss, "rssBytes": rss}
                       if rss is not None else {"time": stamp}),
        }
        # The pods' own cgroup when the container manager made one, else their sum.
        pods_cpu = nodestats.cgroup_cpu("kubepods", self._cgroup_root)
        pods_memory = nodestats.cgroup_memory("kubepods", self._cgroup_root)
        if pods_cpu is None:
            total = sum(p.get("cpu", {}).get("usageCoreNanoSeconds", 0) for p in pods)
            pods_cpu = nodestats.CPUReading(total)
        pods_stats: dict[str, Any] = {
            "name": "pods", "startTime": format_time(self._kubelet_started),
            "cpu": self._cpu_stats("system/pods", now_ns, pods_cpu.usage_core_nanos),
        }
        if pods_memory is not None:
            pods_stats["memory"] = self._memory_stats(stamp, pods_memory,
                                                      nodestats.memory_capacity(self._proc))
        else:
            working = sum(p.get("memory", {}).get("workingSetBytes", 0) for p in pods)
            usage = sum(p.get("memory", {}).get("usageBytes", 0) for p in pods)
            pods_stats["memory"] = {"time": stamp, "usageBytes": usage,
                                    "workingSetBytes": working}
        return [kubelet, pods_stats]

    # -- pods --------------------------------------------------------------------------

    async def _sandbox_stats(self) -> dict[str, api_pb2.PodSandboxStats]:
        if time.monotonic() < self._sandbox_stats_retry_at:
            return {}
        try:
            listed = await self._runtime.list_pod_sandbox_stats()
        except Exception as err:
            # containerd cannot answer for pods without a cgroup parent; sum containers then.
            self._sandbox_stats_retry_at = time.monotonic() + _SANDBOX_STATS_RETRY
            if not self._sandbox_stats_unsupported_logged:
                self._sandbox_stats_unsupported_logged = True
                klog.info("Pod sandbox stats not available from the runtime; summing the "
                          "pods' containers instead", reason=str(err))
            return {}
        return {s.attributes.id: s for s in listed}

    async def _learn_sandbox_pids(self, sandbox_ids: list[str]) -> None:
        """The pid of each sandbox (its network namespace), asked of the runtime once."""
        async def learn(sandbox_id: str) -> None:
            try:
                response = await self._runtime.pod_sandbox_status(sandbox_id, verbose=True)
                pid = int(json.loads(response.info.get("info", "{}")).get("pid", 0))
            except Exception as err:
                klog.v(4).info("Cannot find the network namespace of a sandbox", err=err,
                               podSandboxID=sandbox_id)
                return
            self._sandbox_pids[sandbox_id] = pid

        await asyncio.gather(*(learn(i) for i in sandbox_ids if i not in self._sandbox_pids))

    def _sandbox_interfaces(self, sandbox_id: str) -> list[nodestats.InterfaceReading]:
        pid = self._sandbox_pids.get(sandbox_id)
        if not pid:
            return []
        return nodestats.interfaces(os.path.join(self._proc, str(pid), "net", "dev"))

    def _container_stats(self, container: api_pb2.Container,
                         stats: api_pb2.ContainerStats | None, image_fs: nodestats.FsReading | None,
                         logs_fs: nodestats.FsReading | None, log_usage: tuple[int, int] | None,
                         now: float, only_cpu_and_memory: bool) -> dict[str, Any]:
        name = container.labels.get(CONTAINER_NAME_LABEL) or container.metadata.name
        result: dict[str, Any] = {"name": name,
                                  "startTime": format_time(container.created_at / 1e9)}
        stamp = format_time(now)
        if stats is not None and stats.HasField("cpu"):
            cpu = stats.cpu
            usage = _value(cpu.usage_core_nano_seconds) if cpu.HasField(
                "usage_core_nano_seconds") else None
            result["cpu"] = self._cpu_stats(container.id, cpu.timestamp or int(now * 1e9), usage)
            runtime_cores = _value(cpu.usage_nano_cores) if cpu.HasField(
                "usage_nano_cores") else None
            if runtime_cores:
                result["cpu"]["usageNanoCores"] = runtime_cores
        if stats is not None and stats.HasField("memory"):
            memory = stats.memory
            mem: dict[str, Any] = {"time": format_time((memory.timestamp or now * 1e9) / 1e9)}
            for key, field in (("availableBytes", "available_bytes"),
                               ("usageBytes", "usage_bytes"),
                               ("workingSetBytes", "working_set_bytes"),
                               ("rssBytes", "rss_bytes"), ("pageFaults", "page_faults"),
                               ("majorPageFaults", "major_page_faults")):
                if memory.HasField(field):  # type: ignore[arg-type]
                    value = _value(getattr(memory, field))
                    if key == "availableBytes" and not value:
                        continue  # no limit: nothing to be available against
                    mem[key] = value
            result["memory"] = mem
        if only_cpu_and_memory:
            return result
        if stats is not None and stats.HasField("writable_layer"):
            layer = stats.writable_layer
            result["rootfs"] = _fs_stats(
                format_time(layer.timestamp / 1e9) if layer.timestamp else stamp, image_fs,
                _value(layer.used_bytes) if layer.HasField("used_bytes") else 0,
                _value(layer.inodes_used) if layer.HasField("inodes_used") else 0)
        if log_usage is not None:
            result["logs"] = _fs_stats(stamp, logs_fs, log_usage[0], log_usage[1])
        return result

    async def _pods(self, now: float, image_fs: nodestats.FsReading | None,
                    only_cpu_and_memory: bool) -> list[dict[str, Any]]:
        runtime = self._runtime
        sandboxes, containers, container_stats = await asyncio.gather(
            runtime.list_pod_sandboxes(api_pb2.PodSandboxFilter(
                state=api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_READY))),
            runtime.list_containers(api_pb2.ContainerFilter(
                state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING))),
            runtime.list_container_stats())
        sandbox_stats = await self._sandbox_stats()
        stats_by_id = {s.attributes.id: s for s in container_stats}
        by_sandbox: dict[str, list[api_pb2.Container]] = {}
        for container in containers:
            by_sandbox.setdefault(container.pod_sandbox_id, []).append(container)
        logs_fs = None if only_cpu_and_memory else nodestats.filesystem(self._pod_logs_dir)

        # Only the newest ready sandbox of each pod counts.
        newest: dict[str, api_pb2.PodSandbox] = {}
        for sandbox in sandboxes:
            uid = sandbox.labels.get(POD_UID_LABEL) or sandbox.metadata.uid
            if uid and (uid not in newest or sandbox.created_at > newest[uid].created_at):
                newest[uid] = sandbox

        def identity(uid: str, sandbox: api_pb2.PodSandbox) -> tuple[str, str]:
            meta = sandbox.metadata
            return (sandbox.labels.get(POD_NAME_LABEL) or meta.name,
                    sandbox.labels.get(POD_NAMESPACE_LABEL) or meta.namespace)

        # Every file the summary reads (log directories, network namespaces) in
        # one worker-thread hop, not one per pod.
        files: dict[str, tuple[dict[str, tuple[int, int]], list[nodestats.InterfaceReading]]] = {}
        if not only_cpu_and_memory:
            await self._learn_sandbox_pids([s.id for s in newest.values()])

            def read_files() -> None:
                for uid, sandbox in newest.items():
                    name, namespace = identity(uid, sandbox)
                    log_dir = pod_logs_directory(self._pod_logs_dir, namespace, name, uid)
                    files[uid] = (_log_usages(log_dir, by_sandbox.get(sandbox.id, [])),
                                  self._sandbox_interfaces(sandbox.id))

            await asyncio.to_thread(read_files)

        pods: list[dict[str, Any]] = []
        for uid, sandbox in newest.items():
            name, namespace = identity(uid, sandbox)
            members = by_sandbox.get(sandbox.id, [])
            log_usages, interfaces = files.get(uid, ({}, []))
            entries = [self._container_stats(c, stats_by_id.get(c.id), image_fs, logs_fs,
                                             log_usages.get(c.id), now, only_cpu_and_memory)
                       for c in members]
            pod: dict[str, Any] = {
                "podRef": {"name": name, "namespace": namespace, "uid": uid},
                "startTime": format_time(sandbox.created_at / 1e9),
                "containers": entries,
            }
            self._pod_cpu_and_memory(pod, uid, sandbox_stats.get(sandbox.id), entries, now)
            if not only_cpu_and_memory:
                self._pod_network_and_storage(pod, sandbox_stats.get(sandbox.id), interfaces,
                                              entries, logs_fs, now)
            pods.append(pod)

        live = {"node", "system/kubelet", "system/pods"}
        live.update(c.id for c in containers)
        live.update(f"pod/{uid}" for uid in newest)
        self._cpu.retain(live)
        self._sandbox_pids = {k: v for k, v in self._sandbox_pids.items()
                              if k in {s.id for s in sandboxes}}
        return pods

    def _pod_cpu_and_memory(self, pod: dict[str, Any], uid: str,
                            stats: api_pb2.PodSandboxStats | None,
                            containers: list[dict[str, Any]], now: float) -> None:
        linux = stats.linux if stats is not None and stats.HasField("linux") else None
        if linux is not None and linux.HasField("cpu"):
            pod["cpu"] = self._cpu_stats(f"pod/{uid}", linux.cpu.timestamp or int(now * 1e9),
                                         _value(linux.cpu.usage_core_nano_seconds))
        else:
            with_cpu = [c["cpu"] for c in containers if "usageCoreNanoSeconds" in c.get("cpu", {})]
            if with_cpu:
                pod["cpu"] = self._cpu_stats(f"pod/{uid}", int(now * 1e9),
                                             sum(c["usageCoreNanoSeconds"] for c in with_cpu))
        if linux is not None and linux.HasField("memory"):
            memory = linux.memory
            pod["memory"] = {"time": format_time((memory.timestamp or now * 1e9) / 1e9),
                             "usageBytes": _value(memory.usage_bytes),
                             "workingSetBytes": _value(memory.working_set_bytes),
                             "rssBytes": _value(memory.rss_bytes),
                             "pageFaults": _value(memory.page_faults),
                             "majorPageFaults": _value(memory.major_page_faults)}
        else:
            with_memory = [c["memory"] for c in containers if "workingSetBytes" in
                           c.get("memory", {})]
            if with_memory:
                pod["memory"] = {"time": format_time(now)}
                for key in ("usageBytes", "workingSetBytes", "rssBytes", "pageFaults",
                            "majorPageFaults"):
                    pod["memory"][key] = sum(m.get(key, 0) for m in with_memory)

    def _pod_network_and_storage(self, pod: dict[str, Any],
                                 stats: api_pb2.PodSandboxStats | None,
                                 interfaces: list[nodestats.InterfaceReading],
                                 containers: list[dict[str, Any]],
                                 logs_fs: nodestats.FsReading | None, now: float) -> None:
        stamp = format_time(now)
        linux = stats.linux if stats is not None and stats.HasField("linux") else None
        readings: list[nodestats.InterfaceReading] = []
        if linux is not None and linux.HasField("network"):
            readings = [nodestats.InterfaceReading(
                i.name, _value(i.rx_bytes) or 0, _value(i.rx_errors) or 0,
                _value(i.tx_bytes) or 0, _value(i.tx_errors) or 0)
                for i in linux.network.interfaces]
        if not readings:
            readings = interfaces
        network = _network(stamp, readings, "eth0")
        if network is not None:
            pod["network"] = network
        pod["volume"] = self._volume_stats(pod["podRef"]["uid"])
        used = sum(c.get("rootfs", {}).get("usedBytes", 0) + c.get("logs", {}).get("usedBytes", 0)
                   for c in containers)
        inodes = sum(c.get("rootfs", {}).get("inodesUsed", 0)
                     + c.get("logs", {}).get("inodesUsed", 0) for c in containers)
        pod["ephemeral-storage"] = _fs_stats(stamp, logs_fs, used, inodes)
        if linux is not None and linux.HasField("process"):
            pod["process_stats"] = {"process_count": _value(linux.process.process_count)}

    # -- the summary ------------------------------------------------------------------------

    async def summary(self, only_cpu_and_memory: bool = False) -> dict[str, Any]:
        """The ``Summary`` document, ``only_cpu_and_memory`` as metrics-server asks for it."""
        now = self._clock()
        image_fs_info: api_pb2.ImageFsInfoResponse | None = None
        image_fs: nodestats.FsReading | None = None
        if not only_cpu_and_memory:
            try:
                image_fs_info = await self._images.image_fs_info()
            except Exception as err:
                klog.error("Failed to get the image filesystem info", err)
            if image_fs_info is not None and image_fs_info.image_filesystems:
                mountpoint = image_fs_info.image_filesystems[0].fs_id.mountpoint
                image_fs = nodestats.filesystem(mountpoint) if mountpoint else None
        pods = await self._pods(now, image_fs, only_cpu_and_memory)
        node = await asyncio.to_thread(self._node_stats, now, image_fs_info, pods,
                                       only_cpu_and_memory)
        return {"node": node, "pods": pods}


def _log_usages(log_dir: str, containers: list[api_pb2.Container]) -> dict[str, tuple[int, int]]:
    """Bytes and inodes of each container's log directory (all its restarts' files)."""
    usages: dict[str, tuple[int, int]] = {}
    for container in containers:
        name = container.labels.get(CONTAINER_NAME_LABEL) or container.metadata.name
        usages[container.id] = nodestats.directory_usage(os.path.join(log_dir, name))
    return usages


__all__ = ["CPUUsageCache", "StatsProvider", "format_time"]
