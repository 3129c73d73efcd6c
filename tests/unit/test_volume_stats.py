"""Volume stats: what a pod's volumes use, in /stats/summary and as kubelet_volume_stats_*."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes_asyncio.client import (
    V1Container,
    V1EmptyDirVolumeSource,
    V1HostPathVolumeSource,
    V1ObjectMeta,
    V1PersistentVolumeClaimVolumeSource,
    V1Pod,
    V1PodSpec,
    V1Volume,
)

from pykubelet.events import LoggingRecorder
from pykubelet.kubelet.getters import RootDirs
from pykubelet.volumemanager import MountedVolume, VolumeManager
from pykubelet.volumemanager.persistent import LOCAL_VOLUME
from pykubelet.volumemanager.plugins import EMPTY_DIR, HOST_PATH
from pykubelet.volumemanager.stats import VolumeStatsCache, disk_usage


def claim_volume(name: str, claim: str) -> V1Volume:
    return V1Volume(name=name, persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(
        claim_name=claim))


def pod(uid: str, volumes: list[V1Volume]) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name=f"p-{uid}", namespace="ns", uid=uid),
                 spec=V1PodSpec(containers=[V1Container(name="c")], volumes=volumes))


def test_disk_usage_counts_each_inode_once(tmp_path: Path) -> None:
    empty_bytes, empty_inodes = disk_usage(str(tmp_path))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "big").write_bytes(b"x" * 1_000_000)
    os.link(tmp_path / "sub" / "big", tmp_path / "hard-link")
    used, inodes = disk_usage(str(tmp_path))
    assert inodes == empty_inodes + 2  # the directory and the file, linked twice
    assert 1_000_000 <= used - empty_bytes < 1_100_000


async def test_summary_lists_measured_volumes_and_metrics_name_the_claims(
        tmp_path: Path) -> None:
    scratch, disk = tmp_path / "scratch", tmp_path / "disk"
    scratch.mkdir()
    disk.mkdir()
    (scratch / "file").write_bytes(b"y" * 200_000)
    volumes = [V1Volume(name="scratch", empty_dir=V1EmptyDirVolumeSource()),
               V1Volume(name="node", host_path=V1HostPathVolumeSource(path="/etc")),
               claim_volume("data", "data-db-0")]
    mounted = {"scratch": MountedVolume("scratch", EMPTY_DIR, str(scratch)),
               "node": MountedVolume("node", HOST_PATH, "/etc"),
               "data": MountedVolume("data", LOCAL_VOLUME, str(disk))}
    # A second pod on the same claim: one series per claim, as upstream.
    other = {"data": MountedVolume("data", LOCAL_VOLUME, str(disk))}
    cache = VolumeStatsCache(clock=lambda: 1_700_000_000.0)
    cache.refresh([(pod("u1", volumes), mounted),
                   (pod("u2", [claim_volume("data", "data-db-0")]), other)])

    entries = {e["name"]: e for e in cache.volumes("u1")}
    assert sorted(entries) == ["data", "scratch"]  # hostPath has no figures, as upstream
    assert entries["scratch"]["usedBytes"] >= 200_000 and entries["scratch"]["inodesUsed"] == 2
    assert "pvcRef" not in entries["scratch"]
    fs = os.statvfs(disk)
    data = entries["data"]
    assert data["pvcRef"] == {"name": "data-db-0", "namespace": "ns"}
    assert data["capacityBytes"] == fs.f_blocks * fs.f_frsize
    assert data["inodes"] == fs.f_files and data["time"] == "2023-11-14T22:13:20Z"
    assert cache.volumes("gone") == []

    families = {f.name: f for f in await cache.families()}
    assert sorted(families) == sorted(
        f"kubelet_volume_stats_{n}" for n in ("capacity_bytes", "available_bytes",
                                              "used_bytes", "inodes", "inodes_free",
                                              "inodes_used"))
    samples = families["kubelet_volume_stats_capacity_bytes"].samples
    assert [(s.labels, s.value) for s in samples] == [
        ({"namespace": "ns", "persistentvolumeclaim": "data-db-0"}, float(data["capacityBytes"]))]


def test_a_volume_gone_while_measured_is_left_out(tmp_path: Path) -> None:
    cache = VolumeStatsCache()
    cache.refresh([(pod("u1", [V1Volume(name="x", empty_dir=V1EmptyDirVolumeSource())]),
                    {"x": MountedVolume("x", EMPTY_DIR, str(tmp_path / "absent"))})])
    assert cache.volumes("u1") == []


async def test_the_volume_manager_measures_the_volumes_it_mounted(tmp_path: Path) -> None:
    volumes = VolumeManager(RootDirs(str(tmp_path)), LoggingRecorder(), None)
    scratch = V1Volume(name="scratch", empty_dir=V1EmptyDirVolumeSource())
    await volumes.wait_for_attach_and_mount(pod("u1", [scratch]))
    assert volumes.stats.volumes("u1") == []  # nothing measured before the first period
    await volumes.measure_volumes()
    assert [e["name"] for e in volumes.stats.volumes("u1")] == ["scratch"]
