"""subPath opened one component at a time: what a container can plant in its volume is refused,
what stays inside is followed once, and the bind mount holds the object that was checked."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubelet.volumemanager.mount import is_mount_point, unmount
from pykubelet.volumemanager.subpath import (
    SubPath,
    SubPathError,
    clean_sub_paths,
    open_beneath,
    open_sub_path,
    prepare_safe_sub_path,
    validate_sub_path,
)


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    path = tmp_path / "volume"
    path.mkdir()
    (path / "a" / "b").mkdir(parents=True)
    (path / "a" / "b" / "file").write_text("inside\n")
    return path


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A directory outside the volume, standing for the host's /etc."""
    path = tmp_path / "host"
    path.mkdir()
    (path / "secret").write_text("host secret\n")
    return path


def opened(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def test_absolute_and_backstepping_sub_paths_are_refused_with_upstreams_messages() -> None:
    with pytest.raises(SubPathError, match=r"^error SubPath `/etc` must not be an absolute"):
        validate_sub_path("/etc")
    for bad in ("..", "../x", "a/../../x"):
        with pytest.raises(SubPathError, match=r"must not contain '\.\.'$"):
            validate_sub_path(bad)
    validate_sub_path("a/..b/c..")  # dots inside a name are just a name


def test_a_symlink_anywhere_on_the_way_is_refused_not_followed(volume: Path,
                                                             host_dir: Path) -> None:
    os.symlink(host_dir, volume / "escape")
    os.symlink(host_dir, volume / "a" / "escape")
    os.symlink("b", volume / "a" / "inner")  # even one that stays inside
    for relative in ("escape", "escape/secret", "a/escape", "a/inner/file"):
        with pytest.raises(SubPathError, match="unexpected symlink found"):
            open_beneath(str(volume), relative)
    assert opened(open_beneath(str(volume), "a/b/file")) == str(volume / "a" / "b" / "file")


def test_a_file_in_the_middle_of_the_path_is_refused(volume: Path) -> None:
    with pytest.raises(SubPathError, match="is not a directory"):
        open_beneath(str(volume), "a/b/file/deeper")


def test_missing_directories_are_made_with_the_volumes_mode_whatever_the_umask(
        volume: Path) -> None:
    os.chmod(volume, 0o2775)
    old_umask = os.umask(0o077)
    try:
        fd = open_sub_path(str(volume), "new/deeper")
    finally:
        os.umask(old_umask)
    assert opened(fd) == str(volume / "new" / "deeper")
    for made in (volume / "new", volume / "new" / "deeper"):
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o2775
    with pytest.raises(FileNotFoundError):
        open_beneath(str(volume), "absent")  # without a mode nothing is made


def test_symlinks_that_stay_inside_are_resolved_once_those_leaving_are_refused(
        volume: Path, host_dir: Path) -> None:
    # ConfigMap and Secret volumes: each key is a symlink into ..data.
    os.symlink("a/b", volume / "..data")
    os.symlink("..data/file", volume / "key")
    assert opened(open_sub_path(str(volume), "key")) == str(volume / "a" / "b" / "file")
    os.symlink(host_dir, volume / "escape")
    with pytest.raises(SubPathError, match="not within volume path"):
        open_sub_path(str(volume), "escape/secret")
    # A dangling symlink out of the volume is not made into a directory there either.
    os.symlink(host_dir / "absent", volume / "dangling")
    with pytest.raises(SubPathError, match="not within volume path"):
        open_sub_path(str(volume), "dangling")
    assert not (host_dir / "absent").exists()


def test_the_volume_itself_may_be_reached_through_a_symlink(volume: Path,
                                                          tmp_path: Path) -> None:
    # hostPath volumes name any host path, symlinked ones included.
    os.symlink(volume, tmp_path / "alias")
    assert opened(open_sub_path(str(tmp_path / "alias"), "a/b")) == str(volume / "a" / "b")


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")


@pytest.fixture
def pod_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pod"
    path.mkdir()
    yield path
    for directory, _, _ in os.walk(path / "volume-subpaths"):
        if is_mount_point(directory):
            unmount(directory)


def sub_path(volume: Path, pod_dir: Path, relative: str, index: int = 0) -> SubPath:
    return SubPath(volume_path=str(volume), sub_path=relative, pod_dir=str(pod_dir),
                   volume_name="data", container_name="app", mount_index=index)


@root_only
def test_the_bind_mount_keeps_the_checked_directory_after_a_swap_for_a_symlink(
        volume: Path, pod_dir: Path, host_dir: Path) -> None:
    target = prepare_safe_sub_path(sub_path(volume, pod_dir, "a/b"))
    assert target == str(pod_dir / "volume-subpaths" / "data" / "app" / "0")
    assert is_mount_point(target)
    # The container swaps the directory for a symlink to the host, after the check.
    os.rename(volume / "a" / "b", volume / "a" / "moved")
    os.symlink(host_dir, volume / "a" / "b")
    assert sorted(os.listdir(target)) == ["file"]
    # A restart of the container finds the symlink now and is refused, not redirected.
    with pytest.raises(SubPathError, match="not within volume path"):
        prepare_safe_sub_path(sub_path(volume, pod_dir, "a/b"))


@root_only
def test_a_restarted_container_reuses_its_mount_and_the_pods_mounts_are_cleaned(
        volume: Path, pod_dir: Path) -> None:
    directory = prepare_safe_sub_path(sub_path(volume, pod_dir, "a/b", index=0))
    file = prepare_safe_sub_path(sub_path(volume, pod_dir, "a/b/file", index=1))
    assert Path(file).read_text() == "inside\n"
    assert prepare_safe_sub_path(sub_path(volume, pod_dir, "a/b", index=0)) == directory
    mounted = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
               if f" {directory} " in line]
    assert len(mounted) == 1  # reused, not stacked
    assert clean_sub_paths(str(pod_dir))
    assert not (pod_dir / "volume-subpaths").exists()
    # Only the kubelet's mount points went: the volume's content is untouched.
    assert (volume / "a" / "b" / "file").read_text() == "inside\n"
