"""The pod directories a sync makes before the pod's volumes and containers need them."""

from __future__ import annotations

import stat
from pathlib import Path

from kubernetes_asyncio.client import V1ObjectMeta, V1Pod

from pykubelet.kubelet.pod_sync import KubeletPodSyncer, PodSyncOptions


def syncer_for(root: Path) -> KubeletPodSyncer:
    # Making the directories reads nothing but the root directory.
    return KubeletPodSyncer(PodSyncOptions(root_dir=str(root)), None, None, None, None, None,
                            is_pod_termination_requested=lambda uid: False,
                            abnormal_termination=lambda uid: None)


def pod_named(uid: str) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name="web", namespace="default", uid=uid))


async def test_a_pods_first_sync_makes_its_directory_with_volumes_plugins_and_containers(
        tmp_path: Path) -> None:
    await syncer_for(tmp_path).make_pod_data_dirs(pod_named("uid-1"))

    pod_dir = tmp_path / "pods" / "uid-1"
    for path in (pod_dir, pod_dir / "volumes", pod_dir / "plugins", pod_dir / "containers"):
        assert path.is_dir(), path
    assert stat.S_IMODE((pod_dir / "volumes").stat().st_mode) & 0o007 == 0  # not world-readable


async def test_a_directory_removed_from_under_a_running_pod_is_made_again_on_its_next_sync(
        tmp_path: Path) -> None:
    syncer = syncer_for(tmp_path)
    pod = pod_named("uid-2")
    await syncer.make_pod_data_dirs(pod)
    containers = tmp_path / "pods" / "uid-2" / "containers"
    containers.rmdir()

    await syncer.make_pod_data_dirs(pod)

    assert containers.is_dir()
    assert (tmp_path / "pods" / "uid-2" / "volumes").is_dir()
