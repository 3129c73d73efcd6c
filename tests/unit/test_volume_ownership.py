"""Who owns a pod's volumes and with what mode, as a container sees them: emptyDir with
``fsGroup`` (on disk and ``medium: Memory``), the projected service-account token with
``runAsUser``/``fsGroup``, and the roots of the volumes of API objects. Set up through
``set_up`` as the volume manager calls it, each volume twice (a later pod sync) before
anything is checked."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pykubelet.api import pod_from_dict
from pykubelet.volumemanager.atomic_writer import DATA_DIR_NAME
from pykubelet.volumemanager.mount import is_mount_point, mount_points_under, unmount
from pykubelet.volumemanager.plugins import fs_user_of, set_up

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and chown need root")
FS_GROUP = 123


@pytest.fixture
def pod_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pod"
    path.mkdir()
    yield path
    for point in sorted(mount_points_under(str(path)), reverse=True):
        unmount(point)


def make_pod(volume: dict[str, Any], *, pod_context: dict[str, Any] | None = None,
             containers: list[dict[str, Any]] | None = None) -> Any:
    return pod_from_dict({
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
        "spec": {"securityContext": pod_context or {}, "volumes": [volume],
                 "containers": containers or [{"name": "c", "image": "busybox"}]}})


async def set_up_twice(pod: Any, path: Path, sources: Any = None) -> None:
    for _ in range(2):
        await set_up(pod, pod.spec.volumes[0], str(path), sources)


def created_by_root(directory: Path) -> os.stat_result:
    """What a root container's new file in ``directory`` gets."""
    new = directory / "new-file"
    new.write_text("x")
    return os.stat(new)


@root_only
@pytest.mark.parametrize("medium", ["", "Memory"])
async def test_empty_dir_with_fs_group_gives_new_files_the_group_after_a_later_sync(
        pod_dir: Path, medium: str) -> None:
    path = pod_dir / "volumes" / "kubernetes.io~empty-dir" / "data"
    pod = make_pod({"name": "data", "emptyDir": {"medium": medium}},
                   pod_context={"fsGroup": FS_GROUP})
    await set_up_twice(pod, path)

    info = os.stat(path)
    assert info.st_gid == FS_GROUP
    assert info.st_mode & stat.S_ISGID
    assert created_by_root(path).st_gid == FS_GROUP


@root_only
async def test_memory_empty_dir_root_keeps_the_sticky_bit(pod_dir: Path) -> None:
    path = pod_dir / "volumes" / "kubernetes.io~empty-dir" / "ram"
    pod = make_pod({"name": "ram", "emptyDir": {"medium": "Memory"}},
                   pod_context={"fsGroup": FS_GROUP})
    await set_up_twice(pod, path)

    assert is_mount_point(str(path))
    assert stat.filemode(os.stat(path).st_mode) == "drwxrwsrwt"  # ls: dgtrwxrwxrwx


@root_only
async def test_memory_empty_dir_without_fs_group_is_world_writable_and_sticky(
        pod_dir: Path) -> None:
    path = pod_dir / "volumes" / "kubernetes.io~empty-dir" / "ram"
    await set_up_twice(make_pod({"name": "ram", "emptyDir": {"medium": "Memory"}}), path)

    assert stat.filemode(os.stat(path).st_mode) == "drwxrwxrwt"
    assert created_by_root(path).st_gid == 0


class TokenSources:
    async def service_account_token(self, pod: Any, audience: str, expiration: int) -> str:
        return "token-of-" + pod.metadata.name

    async def secret(self, namespace: str, name: str) -> dict[str, Any]:
        return {"data": {"key": "dmFsdWU="}}

    async def config_map(self, namespace: str, name: str) -> dict[str, Any]:
        return {"data": {"key": "value"}}

    def node_allocatable(self) -> tuple[int, int]:
        return 1000, 1 << 30

    def node_labels(self) -> Mapping[str, str]:
        return {}


TOKEN_VOLUME = {"name": "token", "projected": {"sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}


@root_only
@pytest.mark.parametrize(("pod_context", "mode", "uid", "gid"), [
    ({}, "-rw-r--r--", 0, 0),
    ({"runAsUser": 1000}, "-rw-------", 1000, 0),
    ({"fsGroup": 10000}, "-rw-r-----", 0, 10000),
    ({"runAsUser": 1000, "fsGroup": 10000}, "-rw-r-----", 1000, 10000),
])
async def test_projected_token_is_private_to_the_pods_user_and_group(
        pod_dir: Path, pod_context: dict[str, Any], mode: str, uid: int, gid: int) -> None:
    path = pod_dir / "volumes" / "kubernetes.io~projected" / "token"
    await set_up_twice(make_pod(TOKEN_VOLUME, pod_context=pod_context), path, TokenSources())

    info = os.stat(path / "token")
    assert (stat.filemode(info.st_mode), info.st_uid, info.st_gid) == (mode, uid, gid)
    assert (path / "token").read_text() == "token-of-p"
    assert os.path.islink(path / DATA_DIR_NAME)


@pytest.mark.parametrize(("pod_context", "containers", "expected"), [
    ({"runAsUser": 1000}, [{"name": "a"}, {"name": "b"}], 1000),
    ({}, [{"name": "a", "securityContext": {"runAsUser": 7}}], 7),
    ({"runAsUser": 1000}, [{"name": "a", "securityContext": {"runAsUser": 7}}], 7),
    # one container without a user, or two users: no single owner
    ({}, [{"name": "a", "securityContext": {"runAsUser": 7}}, {"name": "b"}], None),
    ({"runAsUser": 1000}, [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 7}}],
     None),
])
def test_the_token_owner_is_the_one_user_every_container_runs_as(
        pod_context: dict[str, Any], containers: list[dict[str, Any]],
        expected: int | None) -> None:
    pod = make_pod(TOKEN_VOLUME, pod_context=pod_context,
                   containers=[{"image": "busybox", **c} for c in containers])
    assert fs_user_of(pod) == expected


@root_only
@pytest.mark.parametrize(("volume", "plugin", "pod_context", "mode"), [
    # upstream wraps an emptyDir: medium Memory (a tmpfs root, 1777) but for configMap
    ({"secret": {"secretName": "s"}}, "secret", {}, "drwxrwxrwt"),
    ({"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
     "downward-api", {}, "drwxrwxrwt"),
    ({"configMap": {"name": "c"}}, "configmap", {}, "drwxrwxrwx"),
    # fsGroup: the group and its setgid bit stay on the root at the later sync
    ({"secret": {"secretName": "s"}}, "secret", {"fsGroup": FS_GROUP}, "drwxrwsrwt"),
    ({"configMap": {"name": "c"}}, "configmap", {"fsGroup": FS_GROUP}, "drwxrwsrwx"),
])
async def test_object_volume_roots_have_the_wrapped_empty_dirs_mode(
        pod_dir: Path, volume: dict[str, Any], plugin: str, pod_context: dict[str, Any],
        mode: str) -> None:
    path = pod_dir / "volumes" / f"kubernetes.io~{plugin}" / "v"
    await set_up_twice(make_pod({"name": "v", **volume}, pod_context=pod_context), path,
                       TokenSources())

    info = os.stat(path)
    assert stat.filemode(info.st_mode) == mode
    assert info.st_gid == pod_context.get("fsGroup", 0)
    assert is_mount_point(str(path)) == mode.endswith("t")
