"""The kubelet's own mounts (upstream ``mount-utils``, Linux only).

Secrets, projected volumes, downwardAPI volumes and ``emptyDir`` with
``medium: Memory`` live on tmpfs so their content never reaches the node's
disk; ``subPath`` mounts are bind mounts of a descriptor the kubelet opened
(see ``subpath``). The mount(2)/umount2(2) system calls are made through libc
directly: one call per mount, no ``mount`` binary to find and no process to
start (and no ``mount`` canonicalizing a ``/proc/self/fd`` source into a path).
Whether a directory is a mount point is read from ``/proc/self/mountinfo``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Sequence

MNT_DETACH = 2
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_SYNCHRONOUS = 16
MS_REMOUNT = 32
MS_MANDLOCK = 64
MS_DIRSYNC = 128
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
MS_LAZYTIME = 1 << 25
# The options a bind mount takes, as mount(8) turns them into flags: a bind mount
# carries only per-mount flags, so these are all it can apply. The options that clear
# a flag (rw, exec, ...) and the no-ops are known too, so they are not reported.
BIND_MOUNT_FLAGS = {
    "ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
    "sync": MS_SYNCHRONOUS, "mand": MS_MANDLOCK, "dirsync": MS_DIRSYNC,
    "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME, "lazytime": MS_LAZYTIME,
    **dict.fromkeys(("rw", "suid", "dev", "exec", "async", "nomand", "atime", "diratime",
                     "norelatime", "nostrictatime", "nolazytime", "defaults", "bind"), 0),
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class MountError(OSError):
    pass


def mount_tmpfs(target: str, size_bytes: int | None = None) -> None:
    """Mount a tmpfs on ``target``. Its root keeps the kernel's mode for a tmpfs root,
    1777 (world-writable, with the sticky bit), as every kubelet volume on tmpfs has."""
    options = f"size={size_bytes}" if size_bytes else ""
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", 0, options.encode() or None) != 0:
        errno = ctypes.get_errno()
        spelled = f"-o {options} " if options else ""
        raise MountError(errno, f"mount -t tmpfs {spelled}tmpfs {target}: "
                                f"{os.strerror(errno)}")


def bind_flags(options: Sequence[str]) -> tuple[int, list[str]]:
    """The mount flags of ``options`` for a bind mount, and the options it cannot take
    (a file system's own, such as ``nfsvers=4``: the kernel ignores them on a bind)."""
    flags, unusable = 0, []
    for option in options:
        flag = BIND_MOUNT_FLAGS.get(option)
        if flag is None:
            unusable.append(option)
        else:
            flags |= flag
    return flags, unusable


def bind_mount(source: str, target: str, *, read_only: bool = False,
               options: Sequence[str] = ()) -> None:
    """``mount --bind source target`` (not recursive, as upstream's subPath mounts).

    ``read_only`` and ``options`` (``-o bind,ro,noexec``, see ``bind_flags``): the
    kernel takes flags only on a remount of the bind, so that is a second call, made
    when there are flags, and the bind is undone if it fails.
    """
    if _libc.mount(os.fsencode(source), os.fsencode(target), None, MS_BIND, None) != 0:
        errno = ctypes.get_errno()
        raise MountError(errno, f"mount --bind {source} {target}: {os.strerror(errno)}")
    flags = bind_flags(options)[0] | (MS_RDONLY if read_only else 0)
    if flags and _libc.mount(None, os.fsencode(target), None,
                             MS_REMOUNT | MS_BIND | flags, None) != 0:
        errno = ctypes.get_errno()
        unmount(target)
        spelled = ",".join(["remount", "bind", *(["ro"] if read_only else []), *options])
        raise MountError(errno, f"mount -o {spelled} {target}: {os.strerror(errno)}")


def unmount(target: str) -> None:
    if _libc.umount2(os.fsencode(target), 0) != 0:
        errno = ctypes.get_errno()
        # Busy (a container still holds it): detach it, the kernel frees it when unused.
        if _libc.umount2(os.fsencode(target), MNT_DETACH) != 0:
            errno = ctypes.get_errno()
            raise MountError(errno, f"umount {target}: {os.strerror(errno)}")


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) + 0 and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points_under(prefix: str) -> set[str]:
    """Mount points at or below ``prefix`` (one read of mountinfo)."""
    prefix = os.path.realpath(prefix)
    found: set[str] = set()
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                fields = line.split()
                if len(fields) > 4:
                    point = _unescape(fields[4])
                    if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
                        found.add(point)
    except OSError:
        pass
    return found


def is_mount_point(path: str) -> bool:
    return os.path.realpath(path) in mount_points_under(path)


__all__ = ["BIND_MOUNT_FLAGS", "MountError", "bind_flags", "bind_mount", "is_mount_point",
           "mount_points_under", "mount_tmpfs", "unmount"]
