"""``subPath`` mounts that a container cannot redirect (upstream ``volume/util/subpath``, Linux).

A ``subPath`` names a path inside a volume, and the pod's own containers can
write that volume: one of them can turn the directory into a symlink to
anywhere on the host. Checking the path and then handing the runtime the path
string is a time-of-check to time-of-use race (CVE-2021-25741 and its
predecessor CVE-2017-1002101): the runtime resolves the string again when it
makes the container's mounts, and follows a symlink put there in between.

So the kubelet never gives the runtime the path. It opens the subPath one
component at a time from the volume's root, refusing every symlink
(``openat`` with ``O_PATH | O_NOFOLLOW``), which pins the object the check was
made on; creates the missing directories the same way; bind-mounts that open
descriptor (``/proc/self/fd/N``: the kernel takes the object, not a name) onto
a path of its own, ``<pod dir>/volume-subpaths/<volume>/<container>/<index>``;
and gives the runtime that path. A swap after the open changes nothing: the
mount already holds the directory that was checked.

Symlinks that stay inside the volume are allowed, as upstream allows them
(ConfigMap and Secret keys are symlinks into ``..data``): the path is resolved
once, the result must lie inside the volume, and that result is then opened
without following anything, so a symlink appearing afterwards fails the open
instead of being followed.

The bind mounts live as long as the pod's volumes: a restarted container
finds its mount in place and reuses it when it still holds the same object.
``clean_sub_paths`` unmounts them all when the volumes are torn down, also
for pods found on disk after a kubelet restart.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass

from pykubelet.util import klog
from pykubelet.volumemanager.mount import bind_mount, is_mount_point, unmount

SUB_PATH_DIR = "volume-subpaths"
# The kubelet's own directories and placeholder files: nobody else needs to read them.
TARGET_DIR_MODE = 0o750
TARGET_FILE_MODE = 0o640
_OPEN_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class SubPathError(ValueError):
    """A ``subPath`` that would leave its volume, or that cannot be prepared."""


@dataclass(frozen=True)
class SubPath:
    """One ``volumeMounts`` entry with a ``subPath``, and where its bind mount goes."""

    volume_path: str      # the volume's directory on the node
    sub_path: str         # relative, validated by ``validate_sub_path``
    pod_dir: str
    volume_name: str
    container_name: str
    mount_index: int      # the entry's index in the container's volumeMounts

    def bind_target(self) -> str:
        return os.path.join(self.pod_dir, SUB_PATH_DIR, self.volume_name, self.container_name,
                            str(self.mount_index))


def validate_sub_path(sub_path: str) -> None:
    """Refuse what can never stay inside a volume, with upstream's messages."""
    if os.path.isabs(sub_path):
        raise SubPathError(f"error SubPath `{sub_path}` must not be an absolute path")
    if ".." in sub_path.split("/"):
        raise SubPathError(f"unable to provision SubPath `{sub_path}`: must not contain '..'")


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def open_beneath(base: str, relative: str, *, create_mode: int | None = None) -> int:
    """An ``O_PATH`` descriptor of ``base/relative``, no component of which is a symlink.

    Each component is opened relative to its parent's descriptor, so nothing can
    be swapped between the check and the open. With ``create_mode``, missing
    directories are made on the way (with that mode, whatever the umask).
    The caller closes the descriptor.
    """
    fd = os.open(base, _OPEN_FLAGS | os.O_DIRECTORY)
    current = base
    try:
        parts = [part for part in relative.split("/") if part not in ("", ".")]
        for index, part in enumerate(parts):
            if part == "..":
                raise SubPathError(f"path {relative!r} must not contain '..'")
            current = os.path.join(current, part)
            try:
                child = os.open(part, _OPEN_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create_mode is None:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    os.mkdir(part, create_mode, dir_fd=fd)
                child = os.open(part, _OPEN_FLAGS, dir_fd=fd)
                if stat.S_ISDIR(os.fstat(child).st_mode):
                    # fchmod refuses O_PATH descriptors; the /proc link names this very object.
                    os.chmod(f"/proc/self/fd/{child}", create_mode)
            os.close(fd)
            fd = child
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                raise SubPathError(f"unexpected symlink found {current}")
            if index < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise SubPathError(f"{current} is not a directory")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_sub_path(volume_path: str, sub_path: str) -> int:
    """Resolve ``sub_path`` once inside the volume, then open the result without following.

    Missing directories are created with the volume directory's mode (upstream
    ``SafeMakeDir``), so that a group given by ``fsGroup`` can write them.
    """
    base = os.path.realpath(volume_path)
    resolved = os.path.realpath(os.path.join(base, sub_path))
    if not _within(resolved, base):
        raise SubPathError(f"subpath {resolved!r} not within volume path {base!r}")
    create_mode = stat.S_IMODE(os.stat(base).st_mode)
    return open_beneath(base, os.path.relpath(resolved, base), create_mode=create_mode)


def _same_object(fd: int, path: str) -> bool:
    try:
        held, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def prepare_safe_sub_path(sub_path: SubPath) -> str:
    """Bind-mount the subPath's object onto the kubelet's own path, which is returned.

    An existing mount holding the same object is kept (a restarted container);
    one holding something else is replaced.
    """
    fd = open_sub_path(sub_path.volume_path, sub_path.sub_path)
    try:
        target = sub_path.bind_target()
        if is_mount_point(target):
            if _same_object(fd, target):
                return target
            unmount(target)
        os.makedirs(os.path.dirname(target), TARGET_DIR_MODE, exist_ok=True)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            with contextlib.suppress(FileExistsError):
                os.mkdir(target, TARGET_DIR_MODE)
        else:
            # A file target takes any non-directory: the bind mount gives it the source's type.
            with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC,
                              TARGET_FILE_MODE), "wb"):
                pass
        source = f"/proc/self/fd/{fd}"
        klog.v(5).info("Bind-mounting a subPath", source=source, target=target,
                       subPath=sub_path.sub_path, volume=sub_path.volume_name)
        try:
            bind_mount(source, target)
        except OSError:
            _remove_target(target)
            raise
        return target
    finally:
        os.close(fd)


def _remove_target(target: str) -> None:
    with contextlib.suppress(OSError):
        if os.path.isdir(target) and not os.path.islink(target):
            os.rmdir(target)
        else:
            os.unlink(target)


def _entries(directory: str) -> list[str]:
    try:
        return [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
    except (FileNotFoundError, NotADirectoryError):
        return []


def clean_sub_paths(pod_dir: str) -> bool:
    """Unmount and remove every subPath mount of the pod; False if one could not go.

    The layout is walked level by level (``<volume>/<container>/<index>``), never
    into a target: below a mounted target lies a volume's content, not ours.
    """
    root = os.path.join(pod_dir, SUB_PATH_DIR)
    clean = True
    for volume_dir in _entries(root):
        for container_dir in _entries(volume_dir):
            for target in _entries(container_dir):
                if is_mount_point(target):
                    try:
                        unmount(target)
                    except OSError as err:
                        klog.error("Failed to unmount a subPath", err, path=target)
                        clean = False
                        continue
                _remove_target(target)
            _remove_target(container_dir)
        _remove_target(volume_dir)
    _remove_target(root)
    return clean


__all__ = ["SUB_PATH_DIR", "SubPath", "SubPathError", "clean_sub_paths", "open_beneath",
           "open_sub_path", "prepare_safe_sub_path", "validate_sub_path"]
