"""Eviction and image GC on real parts: containerd, the host's cgroups, CRI stats, statvfs.

Pods from the API server are the only ones the eviction manager may evict
(static pods are critical), and standalone pykubelet has no API server yet, so
these tests drive the managers in process: the runtime manager starts pods
(marked as API pods) in the container manager's cgroups on the testbed, and
the eviction manager reads the node's real memory and the pods' real usage.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Pod, V1PodStatus

from pykubelet.api import pod_from_dict
from pykubelet.cm import CgroupManager, ContainerManager, NodeConfig
from pykubelet.cm.cgroups import parse_cgroupfs_name
from pykubelet.config.units import parse_eviction_thresholds
from pykubelet.container.helpers import running_pod_from_status
from pykubelet.cri import RemoteImageService, RemoteRuntimeService
from pykubelet.eviction import EvictionConfig, EvictionManager, SignalSources, observe, pod_usage
from pykubelet.images import ImageGCError, ImageGCManager, ImageGCPolicy
from pykubelet.kubelet.resources import runtime_sandbox_image
from pykubelet.kuberuntime import KubeGenericRuntimeManager, RuntimeManagerOptions
from pykubelet.kuberuntime.gc import ContainerGC
from pykubelet.stats import ImageFsStatsProvider
from testsupport.kubelet_process import write_kernel_tunables
from testsupport.polling import wait_until_async
from testsupport.testbed import SCRIPTS_DIR, Testbed

pytestmark = pytest.mark.containerd
WAIT_SECONDS = 60


class Node:
    def __init__(self, testbed: Testbed, base: Path) -> None:
        self.root = f"pykubelet-evict-{secrets.token_hex(4)}"
        CgroupManager().create((self.root,))
        # Kernel tunables from a directory of the test's: the host's /proc/sys stays as it is.
        self.cm = ContainerManager(NodeConfig(cgroup_root="/" + self.root,
                                              root_dir=str(base)),
                                   sysctl_dir=str(write_kernel_tunables(base / "sysctl")))
        self.cm.start()
        self.runtime_service = RemoteRuntimeService(testbed.endpoint)
        self.image_service = RemoteImageService(testbed.endpoint)
        self.runtime = KubeGenericRuntimeManager(
            self.runtime_service, self.image_service, RuntimeManagerOptions(
                root_dir=str(base / "root"), pod_logs_dir=str(base / "logs"),
                container_logs_dir="", pod_cgroup_parent=self.cm.pod_cgroup_parent))
        self.testbed = testbed
        self.pods: list[V1Pod] = []
        self.statuses: dict[str, V1PodStatus] = {}

    def pod(self, name: str, script: str, **resources: Any) -> V1Pod:
        uid = secrets.token_hex(8)
        pod = pod_from_dict({
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "annotations": {"kubernetes.io/config.source": "api"}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "image": self.testbed.busybox_image,
                "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script],
                "resources": resources}]}})
        self.pods.append(pod)
        return pod

    async def start(self, pod: V1Pod) -> None:
        await self.cm.ensure_pod(pod)

        async def synced_until_running() -> bool:
            status = await self.status(pod)
            if any(c.state.value == "running" for c in status.container_statuses):
                return True
            assert (await self.runtime.sync_pod(pod, status)).error() is None
            return False

        await wait_until_async(synced_until_running, WAIT_SECONDS,
                               f"{pod.metadata.name} running", interval=0.3)

    async def status(self, pod: V1Pod) -> Any:
        return await self.runtime.get_pod_status(pod.metadata.uid, pod.metadata.name,
                                                 pod.metadata.namespace)

    async def kill(self, pod: V1Pod, grace: int, status_func: Any) -> None:
        status = V1PodStatus(phase="Running")
        status_func(status)
        self.statuses[pod.metadata.name] = status
        await self.runtime.kill_pod(pod, running_pod_from_status(
            await self.status(pod), self.runtime.runtime_type), grace)
        self.pods.remove(pod)

    async def cleanup(self) -> None:
        for pod in list(self.pods):
            status = await self.status(pod)
            await self.runtime.kill_pod(pod, running_pod_from_status(
                status, self.runtime.runtime_type), 0)
        # The container GC removes what the stopped pods left, as for pods no source wants.
        await ContainerGC(self.runtime, _EveryPodDeleted()).garbage_collect(
            all_sources_ready=True)
        await self.runtime_service.close()
        await self.image_service.close()
        await asyncio.to_thread(CgroupManager().destroy, parse_cgroupfs_name(self.root))


class _EveryPodDeleted:
    def should_pod_content_be_removed(self, uid: str) -> bool:
        return True

    def should_pod_runtime_be_removed(self, uid: str) -> bool:
        return True


@pytest.fixture
async def node(testbed: Testbed, tmp_path: Path) -> AsyncIterator[Node]:
    node = Node(testbed, tmp_path)
    try:
        yield node
    finally:
        await node.cleanup()


async def test_memory_pressure_evicts_the_best_effort_pod_first(node: Node) -> None:
    burstable = node.pod("burstable", "sleep 3600", requests={"memory": "256Mi"})
    best_effort = node.pod("besteffort", "x=$(head -c 4194304 /dev/zero | tr '\\0' x); "
                                         "sleep 3600")
    for pod in (burstable, best_effort):
        await node.start(pod)
    capacity = int(node.cm.capacity.values["memory"])
    # A threshold above what is available: the node is "low on memory" right now.
    thresholds = parse_eviction_thresholds({"memory.available": str(capacity)}, {}, {}, {})
    cgroups = node.cm.cgroups
    sources = SignalSources(memory_capacity=capacity,
                            node_working_set=lambda: cgroups.memory_stats(()).working_set,
                            nodefs_path="/")
    evictions = EvictionManager(
        EvictionConfig(thresholds=thresholds), lambda: observe(sources),
        lambda disk: pod_usage(node.runtime_service), lambda: list(node.pods), node.kill)

    evicted = await evictions.synchronize()
    assert evicted is best_effort
    assert evictions.is_under_memory_pressure()
    status = node.statuses["besteffort"]
    assert (status.phase, status.reason) == ("Failed", "Evicted")
    assert status.message.startswith(
        f"The node was low on resource: memory. Threshold quantity: "
        f"{capacity // 1024}Ki, available: ")
    assert "Container c was using " in status.message
    assert status.message.endswith(", request is 0, has larger consumption of memory. ")
    after = await node.status(best_effort)
    assert all(c.state.value == "exited" for c in after.container_statuses)
    assert any(c.state.value == "running"
               for c in (await node.status(burstable)).container_statuses)
    # Under memory pressure a new BestEffort pod is turned away; a Burstable one is not.
    assert evictions.admit(node.pod("late", "true")) == (
        "Evicted", "The node had condition: [MemoryPressure]. ")
    assert evictions.admit(node.pod("late2", "true", requests={"memory": "1Mi"})) is None


def build_image(testbed: Testbed, base: Path, name: str) -> None:
    rootfs = base / "rootfs"
    rootfs.mkdir()
    (rootfs / "payload").write_bytes(secrets.token_bytes(256 * 1024))
    archive = base / "victim.tar"
    subprocess.run([sys.executable, str(SCRIPTS_DIR / "oci_image.py"), "--rootfs", str(rootfs),
                    "--name", name, "--out", str(archive)], check=True)
    snapshotter = (testbed.dir / "snapshotter").read_text().strip()
    subprocess.run(["ctr", "-a", str(testbed.socket_path), "-n", "k8s.io", "images", "import",
                    "--snapshotter", snapshotter, str(archive)], check=True,
                   capture_output=True)


async def test_image_gc_removes_unused_images_over_the_threshold_and_keeps_used_ones(
        node: Node, testbed: Testbed, tmp_path: Path) -> None:
    victim = f"pykubelet.local/gc-victim:{secrets.token_hex(3)}"
    await asyncio.to_thread(build_image, testbed, tmp_path, victim)
    await node.start(node.pod("user", "sleep 3600"))
    fs = ImageFsStatsProvider(node.image_service)
    sandbox_image = await runtime_sandbox_image(node.runtime_service)
    assert sandbox_image == testbed.pause_image

    def tags(images: list[Any]) -> set[str]:
        return {tag for image in images for tag in image.repo_tags}

    relaxed = ImageGCManager(node.runtime, node.image_service, fs.image_fs,
                             ImageGCPolicy(high_threshold_percent=100, low_threshold_percent=99,
                                           min_age=0), sandbox_image=sandbox_image)
    await relaxed.garbage_collect()
    assert victim in tags(await node.image_service.list_images())

    strict = ImageGCManager(node.runtime, node.image_service, fs.image_fs,
                            ImageGCPolicy(high_threshold_percent=1, low_threshold_percent=0,
                                          min_age=0), sandbox_image=sandbox_image)
    with pytest.raises(ImageGCError):
        # Usage cannot reach 0%: everything removable goes and the shortfall is reported.
        await strict.garbage_collect()
    left = tags(await node.image_service.list_images())
    assert victim not in left
    assert {testbed.busybox_image, testbed.pause_image} <= left
