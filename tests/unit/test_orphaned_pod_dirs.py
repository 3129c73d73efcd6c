"""The kubelet's clean-up of a deleted pod's directory, on the root's kubelet: it waits for
the volume manager's reconciler, the one that tears volumes down (upstream
``cleanupOrphanedPodDirs``)."""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio.client import (
    V1Container,
    V1EmptyDirVolumeSource,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1Volume,
)

from tests.unit.kubelet_fakes import new_kubelet


def pod_with_scratch_space(uid: str) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name="p", namespace="ns", uid=uid),
                 spec=V1PodSpec(containers=[V1Container(name="c")], volumes=[
                     V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())]))


async def test_a_deleted_pods_directory_goes_only_after_its_volumes_are_torn_down(
        tmp_path: Path) -> None:
    async with new_kubelet(tmp_path) as kubelet:
        volumes = kubelet.volume_manager
        await volumes.wait_for_attach_and_mount(pod_with_scratch_space("gone"))
        pod_dir = tmp_path / "kubelet" / "pods" / "gone"
        content = pod_dir / "volumes" / "kubernetes.io~empty-dir" / "data" / "file"
        content.write_text("the pod's")
        (pod_dir / "etc-hosts").write_text("127.0.0.1 localhost\n")
        kubelet.pod_workers.sync_known_pods({})  # no source wants the pod any more

        # Housekeeping before the reconciler's pass: the volume is the reconciler's.
        kubelet._remove_orphaned_pod_dirs(set())
        assert content.read_text() == "the pod's"

        await volumes.reconcile()
        assert not content.exists()
        kubelet._remove_orphaned_pod_dirs(set())
        assert not pod_dir.exists()
        kubelet._remove_orphaned_pod_dirs(set())  # and nothing more to do
