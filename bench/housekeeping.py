"""Housekeeping cost of resource management with 10 and 100 pods.

Every housekeeping pass pykubelet runs periodically is timed on a private
containerd with N running pods (one busybox container each, in the container
manager's pod cgroups under a private cgroupRoot):

- eviction signals: node memory (root cgroup), nodefs, imagefs (CRI
  ImageFsInfo + statvfs), pids; plus per-pod usage (CRI ListContainerStats);
- eviction round: a full ``synchronize`` with upstream's default thresholds
  (none met, so no ranking: the common case);
- container GC: one ``garbage_collect`` pass (listing containers and sandboxes);
- image GC: detection (ListImages + the runtime's pods) and the disk check;
- log rotation: one ``rotate_logs`` pass (ListContainers, ContainerStatus and a
  stat per running container; nothing is over the limit);
- QoS cgroups: one update of the burstable/besteffort cpu.shares.

For each pass it prints the median over ``--passes`` runs of: pykubelet's own
CPU time (process time), containerd's CPU time (from /proc/<pid>/stat) and the
wall time, at 10 and at 100 pods, and the growth from 10 to 100. Prints only;
exits 1 when the measurement broke.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.harness import remove_all_sandboxes
from pykubelet.api import pod_from_dict
from pykubelet.cm import CgroupManager, ContainerManager, NodeConfig
from pykubelet.cm.cgroups import parse_cgroupfs_name
from pykubelet.config.types import DEFAULT_EVICTION_HARD
from pykubelet.config.units import parse_eviction_thresholds
from pykubelet.cri import RemoteImageService, RemoteRuntimeService
from pykubelet.eviction import (
    EvictionConfig,
    EvictionManager,
    SignalSources,
    observe,
    pod_usage,
)
from pykubelet.images import ImageGCManager, ImageGCPolicy
from pykubelet.kuberuntime import KubeGenericRuntimeManager, RuntimeManagerOptions
from pykubelet.kuberuntime.gc import ContainerGC
from pykubelet.logs import ContainerLogManager, LogRotatePolicy
from pykubelet.stats import ImageFsStatsProvider
from testsupport.kubelet_process import write_kernel_tunables
from testsupport.testbed import Testbed, TestbedError

CLK_TCK = os.sysconf("SC_CLK_TCK")


class NoDeletedPods:
    def should_pod_content_be_removed(self, uid: str) -> bool:
        return False

    def should_pod_runtime_be_removed(self, uid: str) -> bool:
        return False


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Bench:
    def __init__(self, testbed: Testbed, work: Path) -> None:
        self.testbed = testbed
        self.root = f"pykubelet-bench-{secrets.token_hex(4)}"
        CgroupManager().create((self.root,))
        # Kernel tunables from a directory of its own: the host's /proc/sys stays as it is.
        self.cm = ContainerManager(NodeConfig(cgroup_root="/" + self.root, root_dir=str(work)),
                                   sysctl_dir=str(write_kernel_tunables(work / "sysctl")))
        self.cm.start()
        self.runtime_service = RemoteRuntimeService(testbed.endpoint, 120)
        self.image_service = RemoteImageService(testbed.endpoint, 120)
        self.runtime = KubeGenericRuntimeManager(
            self.runtime_service, self.image_service, RuntimeManagerOptions(
                root_dir=str(work / "root"), pod_logs_dir=str(work / "logs"),
                container_logs_dir="", pod_cgroup_parent=self.cm.pod_cgroup_parent))
        self.pods: list[Any] = []
        self.containerd_pid = int((testbed.dir / "containerd.pid").read_text())
        self.work = work

    async def add_pods(self, total: int) -> None:
        async def start(index: int) -> None:
            pod = pod_from_dict({
                "metadata": {"name": f"bench-{index}", "namespace": "default",
                             "uid": secrets.token_hex(8)},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "c", "image": self.testbed.busybox_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "echo started; sleep 36000"],
                    "resources": {"requests": {"cpu": "10m"}}}]}})
            await self.cm.ensure_pod(pod)
            status = await self.runtime.get_pod_status(pod.metadata.uid, pod.metadata.name,
                                                       "default")
            result = await self.runtime.sync_pod(pod, status)
            if result.error() is not None:
                raise RuntimeError(f"pod {index} failed: {result.error()}")
            self.pods.append(pod)

        pending = list(range(len(self.pods), total))
        while pending:
            batch, pending = pending[:10], pending[10:]
            await asyncio.gather(*(start(i) for i in batch))

    def passes(self) -> dict[str, Callable[[], Awaitable[Any]]]:
        cgroups = self.cm.cgroups
        fs = ImageFsStatsProvider(self.image_service)
        capacity = int(self.cm.capacity.values["memory"])
        sources = SignalSources(
            memory_capacity=capacity, node_working_set=lambda: cgroups.memory_stats(()).working_set,
            nodefs_path=str(self.work), image_fs=fs.image_fs,
            pods_working_set=lambda: cgroups.memory_stats(self.cm.root).working_set,
            allocatable_memory=capacity, pid_max=4194304)
        eviction = EvictionManager(
            EvictionConfig(thresholds=parse_eviction_thresholds(
                dict(DEFAULT_EVICTION_HARD), {}, {}, {})),
            lambda: observe(sources), lambda disk: pod_usage(self.runtime_service),
            lambda: list(self.pods), self._never_kill)
        gc = ContainerGC(self.runtime, NoDeletedPods())
        images = ImageGCManager(self.runtime, self.image_service, fs.image_fs,
                                ImageGCPolicy(high_threshold_percent=100))
        logs = ContainerLogManager(self.runtime_service, LogRotatePolicy(max_size=10 * 2**20),
                                   workers=1)
        self.cm.active_pods = lambda: list(self.pods)

        async def signals() -> None:
            await observe(sources)
            await pod_usage(self.runtime_service)

        return {
            "eviction signals": signals,
            "eviction round": eviction.synchronize,
            "container GC": lambda: gc.garbage_collect(True),
            "image GC": lambda: image_gc_pass(images),
            "log rotation": logs.rotate_logs,
            "QoS cgroups": self.cm.update_qos_cgroups,
        }

    async def _never_kill(self, *_: Any) -> None:
        raise AssertionError("no threshold should be met")

    async def measure(self, runs: int) -> dict[str, tuple[float, float, float]]:
        results = {}
        for name, run in self.passes().items():
            own, runtime, wall = [], [], []
            await run()  # warm up
            for _ in range(runs):
                cpu0, rt0, wall0 = (time.process_time(), process_cpu(self.containerd_pid),
                                    time.perf_counter())
                await run()
                own.append(time.process_time() - cpu0)
                runtime.append(process_cpu(self.containerd_pid) - rt0)
                wall.append(time.perf_counter() - wall0)
            results[name] = (statistics.median(own) * 1000, statistics.median(runtime) * 1000,
                             statistics.median(wall) * 1000)
        return results

    async def close(self) -> None:
        await remove_all_sandboxes(self.runtime_service)
        await self.runtime_service.close()
        await self.image_service.close()
        await asyncio.to_thread(CgroupManager().destroy, parse_cgroupfs_name(self.root))


async def image_gc_pass(images: ImageGCManager) -> None:
    """What the periodic task does: detection (images in use, ages), then the disk check."""
    await images.detect_images(time.time())
    await images.garbage_collect()


async def run(testbed: Testbed, work: Path, sizes: list[int], runs: int) -> None:
    bench = Bench(testbed, work)
    table: dict[int, dict[str, tuple[float, float, float]]] = {}
    try:
        for size in sizes:
            started = time.perf_counter()
            await bench.add_pods(size)
            print(f"{size} pods running (took {time.perf_counter() - started:.0f} s)",
                  flush=True)
            await asyncio.sleep(2)
            table[size] = await bench.measure(runs)
    finally:
        await bench.close()
    print()
    print(f"median of {runs} passes; CPU = pykubelet process time, containerd = its CPU time")
    header = f"{'pass':<18}" + "".join(
        f"{f'{n} pods: CPU / containerd / wall (ms)':>42}" for n in sizes) + f"{'CPU growth':>12}"
    print(header)
    for name in table[sizes[0]]:
        row = f"{name:<18}"
        for size in sizes:
            own, runtime, wall = table[size][name]
            row += f"{f'{own:.1f} / {runtime:.1f} / {wall:.1f}':>42}"
        first, last = table[sizes[0]][name][0], table[sizes[-1]][name][0]
        row += f"{(last / first if first else float('nan')):>11.1f}x"
        print(row)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100],
                        help="pod counts to measure at, ascending (default 10 100)")
    parser.add_argument("--passes", type=int, default=10, help="timed runs of each pass")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    testbed = Testbed.fresh()
    work = Path(f"/tmp/pkb-{secrets.token_hex(3)}")
    work.mkdir()
    try:
        testbed.build_images()
        testbed.start()
        asyncio.run(run(testbed, work, sorted(args.sizes), args.passes))
    except KeyboardInterrupt:
        return 130
    except (TestbedError, RuntimeError, OSError) as err:
        print(f"housekeeping benchmark failed: {err}", file=sys.stderr)
        return 1
    finally:
        try:
            testbed.stop()
        except TestbedError as err:
            print(f"stopping the testbed failed: {err}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
