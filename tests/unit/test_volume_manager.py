"""The volume manager on a temporary root: set-up before containers, FailedMount, CRI mounts,
tear-down by the reconciler, and what a restarted kubelet finds on disk."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import (
    V1ConfigMapVolumeSource,
    V1Container,
    V1EmptyDirVolumeSource,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1SecurityContext,
    V1Volume,
    V1VolumeMount,
)

from pykubelet import volumemanager
from pykubelet.kubelet.getters import RootDirs
from pykubelet.kubelet.volume_host import VolumeHost
from pykubelet.volumemanager import (
    FAILED_MOUNT,
    MountPrepareError,
    VolumeManager,
    VolumeMountError,
)
from pykubelet.volumemanager.subpath import SubPath, open_sub_path


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Any, event_type: str, reason: str, message: str,
              *args: Any, **kwargs: Any) -> None:
        self.events.append((event_type, reason, message))


def pod(uid: str, volumes: list[V1Volume], mounts: list[V1VolumeMount] | None = None,
        privileged: bool = False) -> V1Pod:
    container = V1Container(name="c", volume_mounts=mounts or [],
                            security_context=V1SecurityContext(privileged=privileged))
    return V1Pod(metadata=V1ObjectMeta(name="p", namespace="ns", uid=uid),
                 spec=V1PodSpec(containers=[container], volumes=volumes))


def check_sub_path(sub_path: SubPath) -> str:
    """The kubelet's subPath check and directory creation, without the bind mount (which
    needs root; tests/unit/test_subpath.py and the integration tests make it)."""
    os.close(open_sub_path(sub_path.volume_path, sub_path.sub_path))
    return sub_path.bind_target()


def manager(root: Path, recorder: Recorder, removed: set[str]) -> VolumeManager:
    return VolumeManager(RootDirs(str(root)), recorder, VolumeHost(lambda: (1000, 1 << 30)),
                         pod_runtime_removed=lambda uid: uid in removed,
                         prepare_sub_path=check_sub_path)


async def test_set_up_mounts_and_tear_down(tmp_path: Path) -> None:
    recorder, removed = Recorder(), set[str]()
    volumes = manager(tmp_path, recorder, removed)
    data = V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())
    p = pod("u1", [data], [V1VolumeMount(name="data", mount_path="/data", read_only=True),
                           V1VolumeMount(name="data", mount_path="/sub", sub_path="x/y")])
    await volumes.wait_for_attach_and_mount(p)
    path = tmp_path / "pods" / "u1" / "volumes" / "kubernetes.io~empty-dir" / "data"
    assert path.is_dir() and os.stat(path).st_mode & 0o777 == 0o777
    mounts = volumes.mounts_for(p, p.spec.containers[0], {})
    # The subPath reaches the runtime as the kubelet's own mount point, never as a path
    # inside the volume (which a container could swap for a symlink).
    target = tmp_path / "pods" / "u1" / "volume-subpaths" / "data" / "c" / "1"
    assert [(m.container_path, m.host_path, m.readonly) for m in mounts] == [
        ("/data", str(path), True), ("/sub", str(target), False)]
    assert (path / "x" / "y").is_dir()
    assert recorder.events == []
    # Not removed yet: the reconciler keeps it; once the runtime may drop the pod, it goes.
    await volumes.reconcile()
    assert path.exists()
    removed.add("u1")
    await volumes.reconcile()
    assert not path.exists()
    assert volumes.mounted_volumes("u1") == {}


async def test_a_volume_that_cannot_be_set_up_fails_the_sync_with_an_event(
        tmp_path: Path) -> None:
    recorder = Recorder()
    volumes = manager(tmp_path, recorder, set())
    cfg = V1Volume(name="cfg", config_map=V1ConfigMapVolumeSource(name="settings"))
    p = pod("u2", [cfg], [V1VolumeMount(name="cfg", mount_path="/cfg")])
    with pytest.raises(VolumeMountError, match=r"unmounted volumes=\[cfg\]"):
        await volumes.wait_for_attach_and_mount(p)
    assert recorder.events and recorder.events[0][:2] == ("Warning", FAILED_MOUNT)
    assert recorder.events[0][2].startswith('MountVolume.SetUp failed for volume "cfg" : '
                                            'cannot read configmap "settings"')
    with pytest.raises(MountPrepareError, match="cannot find volume 'cfg'"):
        volumes.mounts_for(p, p.spec.containers[0], {})


async def test_sub_path_expr_and_propagation_rules(tmp_path: Path) -> None:
    volumes = manager(tmp_path, Recorder(), set())
    data = V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())
    p = pod("u3", [data], [V1VolumeMount(name="data", mount_path="/d",
                                         sub_path_expr="$(POD)/logs")])
    await volumes.wait_for_attach_and_mount(p)
    volumes.mounts_for(p, p.spec.containers[0], {"POD": "web-1"})
    assert (tmp_path / "pods" / "u3" / "volumes" / "kubernetes.io~empty-dir" / "data" / "web-1"
            / "logs").is_dir()
    escape = pod("u3", [data], [V1VolumeMount(name="data", mount_path="/d",
                                              sub_path_expr="$(UP)")])
    with pytest.raises(MountPrepareError, match=r"must not contain '\.\.'"):
        volumes.mounts_for(escape, escape.spec.containers[0], {"UP": ".."})
    both = pod("u3", [data], [V1VolumeMount(name="data", mount_path="/d",
                                            mount_propagation="Bidirectional")])
    with pytest.raises(MountPrepareError, match="privileged"):
        volumes.mounts_for(both, both.spec.containers[0], {})


async def test_a_restarted_kubelet_finds_and_cleans_volumes_on_disk(tmp_path: Path) -> None:
    first = manager(tmp_path, Recorder(), set())
    data = V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())
    await first.wait_for_attach_and_mount(pod("old", [data]))
    path = tmp_path / "pods" / "old" / "volumes" / "kubernetes.io~empty-dir" / "data"
    (path / "file").write_text("x")
    sources_ready = False
    second = VolumeManager(RootDirs(str(tmp_path)), Recorder(),
                           VolumeHost(lambda: (1, 1)), pod_runtime_removed=lambda uid: True,
                           sources_ready=lambda: sources_ready)
    await second.reconcile()
    assert "data" in second.mounted_volumes("old")
    assert path.exists()  # the sources may still bring the pod back
    sources_ready = True
    await second.reconcile()
    assert not path.exists()


async def test_mount_propagation_reaches_the_cri_mount(tmp_path: Path) -> None:
    volumes = manager(tmp_path, Recorder(), set())
    data = V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())
    mounts = [V1VolumeMount(name="data", mount_path="/a"),
              V1VolumeMount(name="data", mount_path="/b", mount_propagation="HostToContainer"),
              V1VolumeMount(name="data", mount_path="/c", mount_propagation="Bidirectional")]
    p = pod("u4", [data], mounts, privileged=True)
    await volumes.wait_for_attach_and_mount(p)
    assert [m.propagation for m in volumes.mounts_for(p, p.spec.containers[0], {})] == [
        api_pb2.MountPropagation.PROPAGATION_PRIVATE,
        api_pb2.MountPropagation.PROPAGATION_HOST_TO_CONTAINER,
        api_pb2.MountPropagation.PROPAGATION_BIDIRECTIONAL]
    bad = pod("u4", [data], [V1VolumeMount(name="data", mount_path="/d",
                                           mount_propagation="Sideways")])
    with pytest.raises(MountPrepareError, match="invalid mountPropagation"):
        volumes.mounts_for(bad, bad.spec.containers[0], {})


EMPTY_DIR = "kubernetes.io~empty-dir"


async def test_a_pod_directory_removed_in_the_middle_of_a_teardown_is_torn_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault run's crash: the directory went (the kubelet's clean-up of orphaned pod
    directories) after the reconciler had checked ``volumes`` and before it listed it."""
    removed, forgotten = set[str](), list[str]()
    volumes = VolumeManager(RootDirs(str(tmp_path)), Recorder(),
                            VolumeHost(lambda: (1000, 1 << 30)),
                            pod_runtime_removed=lambda uid: uid in removed,
                            torn_down=[forgotten.append])
    data = V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())
    await volumes.wait_for_attach_and_mount(pod("u1", [data]))
    await volumes.wait_for_attach_and_mount(pod("u2", [data]))
    first = tmp_path / "pods" / "u1"
    real_mount_points_under = volumemanager.mount_points_under

    def removed_meanwhile(prefix: str) -> set[str]:
        # The reconciler has seen ``volumes`` and asks what is mounted in it: now it goes.
        if prefix == str(first / "volumes") and first.exists():
            shutil.rmtree(first)
        return real_mount_points_under(prefix)

    monkeypatch.setattr(volumemanager, "mount_points_under", removed_meanwhile)
    removed.update({"u1", "u2"})
    await volumes.reconcile()
    # Gone is torn down: the reconciler forgot the pod and went on to the next one.
    assert not first.exists()
    assert volumes.mounted_volumes("u1") == {} and forgotten == ["u1", "u2"]
    assert not (tmp_path / "pods" / "u2" / "volumes" / EMPTY_DIR / "data").exists()
    await volumes.reconcile()
    assert forgotten == ["u1", "u2"]  # once each
    with volumes.pod_dir_removal("u1") as removable:
        assert removable  # nothing left to wait for


async def test_a_gone_pods_directory_may_go_only_once_the_reconciler_tore_its_volumes_down(
        tmp_path: Path) -> None:
    removed = set[str]()
    volumes = manager(tmp_path, Recorder(), removed)
    data = V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())
    await volumes.wait_for_attach_and_mount(pod("u1", [data]))
    content = tmp_path / "pods" / "u1" / "volumes" / EMPTY_DIR / "data" / "file"
    content.write_text("the pod's")
    removed.add("u1")
    with volumes.pod_dir_removal("u1") as removable:
        assert not removable  # the reconciler has not torn the volume down yet
    assert content.read_text() == "the pod's"
    await volumes.reconcile()
    with volumes.pod_dir_removal("u1") as removable:
        assert removable
        assert not (tmp_path / "pods" / "u1" / "volumes").exists()


async def test_a_pod_directory_with_a_mount_or_volume_content_in_it_may_not_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a restarted kubelet finds before its reconciler's first pass: the clean-up of
    orphaned directories must not be the one that deletes it."""
    volume = tmp_path / "pods" / "u1" / "volumes" / EMPTY_DIR / "data"
    volume.mkdir(parents=True)
    (volume / "file").write_text("the pod's")
    volumes = manager(tmp_path, Recorder(), {"u1"})
    with volumes.pod_dir_removal("u1") as removable:
        assert not removable
    assert (volume / "file").read_text() == "the pod's"
    (volume / "file").unlink()
    monkeypatch.setattr(volumemanager, "mount_points_under",
                        lambda prefix: {str(volume)} if str(volume).startswith(prefix) else set())
    with volumes.pod_dir_removal("u1") as removable:
        assert not removable  # an empty directory, but a mount point
    assert volume.is_dir()
