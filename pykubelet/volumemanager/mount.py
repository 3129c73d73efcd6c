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

MNT_DETACH = 2
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class MountError(OSError):
    pass


def mount_tmpfs(target: str, size_bytes: int | None = None) -> None:
    options = "mode=0755" + (f",size={size_bytes}" if size_bytes else "")
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", 0, options.encode()) != 0:
        errno = ctypes.get_errno()
        raise MountError(errno, f"mount -t tmpfs -o {options} tmpfs {target}: "
                                f"{os.strerror(errno)}")


def bind_mount(source: str, target: str, *, read_only: bool = False) -> None:
    """``mount --bind source target`` (not recursive, as upstream's subPath mounts).

    ``read_only``: ``-o bind,ro``; the kernel takes the flag only on a remount of the
    bind, so it is a second call, and the bind is undone if that one fails.
    """
    if _libc.mount(os.fsencode(source), os.fsencode(target), None, MS_BIND, None) != 0:
        errno = ctypes.get_errno()
        raise MountError(errno, f"mount --bind {source} {target}: {os.strerror(errno)}")
    if read_only and _libc.mount(None, os.fsencode(target), None,
                                 MS_REMOUNT | MS_BIND | MS_RDONLY, None) != 0:
        errno = ctypes.get_errno()
        unmount(target)
        raise MountError(errno, f"mount -o remount,bind,ro {target}: {os.strerror(errno)}")


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


__all__ = ["MountError", "bind_mount", "is_mount_point", "mount_points_under", "mount_tmpfs",
           "unmount"]
