"""Filesystem statistics the resource managers share (eviction, image GC).

- ``fs_stats``: capacity, available bytes and inodes of the filesystem holding a path;
- ``ImageFsStatsProvider``: the image filesystem, found through CRI ``ImageFsInfo``
  (its mount point and the bytes and inodes images use), measured with ``statvfs``.

The eviction manager (nodefs/imagefs signals) and the image garbage collector
(``imageGCHighThresholdPercent``) read the same numbers from here.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from pykubelet.cri import ImageService


@dataclass(frozen=True)
class FsStats:
    capacity: int
    available: int
    inodes: int
    inodes_free: int
    # Bytes and inodes the images themselves take (image filesystem only).
    used_by_images: int = 0
    inodes_used_by_images: int = 0
    mountpoint: str = ""


def fs_stats(path: str) -> FsStats:
    """Capacity and free space of the filesystem holding ``path`` (blocking, cheap)."""
    stat = os.statvfs(path)
    return FsStats(capacity=stat.f_blocks * stat.f_frsize,
                   available=stat.f_bavail * stat.f_frsize,
                   inodes=stat.f_files, inodes_free=stat.f_favail, mountpoint=path)


class ImageFsStatsProvider:
    """The runtime's image filesystem, as CRI reports it and ``statvfs`` measures it."""

    def __init__(self, image_service: ImageService, fallback_path: str = "/") -> None:
        self.image_service = image_service
        self.fallback_path = fallback_path

    async def image_fs(self) -> FsStats:
        response = await self.image_service.image_fs_info()
        filesystems = list(response.image_filesystems)
        mountpoint = filesystems[0].fs_id.mountpoint if filesystems else ""
        base = await asyncio.to_thread(fs_stats, mountpoint if mountpoint and os.path.exists(
            mountpoint) else self.fallback_path)
        used = sum(f.used_bytes.value for f in filesystems)
        inodes_used = sum(f.inodes_used.value for f in filesystems)
        return FsStats(capacity=base.capacity, available=base.available, inodes=base.inodes,
                       inodes_free=base.inodes_free, used_by_images=used,
                       inodes_used_by_images=inodes_used, mountpoint=mountpoint or base.mountpoint)


__all__ = ["FsStats", "ImageFsStatsProvider", "fs_stats"]
