"""Image garbage collection (upstream ``pkg/kubelet/images/image_gc_manager.go``).

The manager remembers, per image ID, when it first saw the image and when a
container last used it (any container the runtime still has, running or not,
counts as a use: the runtime would refuse to remove its image anyway).

Every pass (5 minutes, and from the eviction manager under disk pressure):

1. with ``imageMaximumGCAge`` set, images unused for longer than that go;
2. when the image filesystem is at or above ``imageGCHighThresholdPercent``
   used, unused images are removed, least recently used first, until usage is
   down to ``imageGCLowThresholdPercent``.

Never removed: images in use, pinned images (the runtime pins its sandbox
image) and the pause image by name, and images younger than
``imageMinimumGCAge`` (so an image pulled for a pod that has not started its
container yet survives).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pykubelet.container import Runtime
from pykubelet.cri import ImageService
from pykubelet.events import WARNING, EventRecorder
from pykubelet.stats import FsStats
from pykubelet.util import klog

# Upstream kubelet's ImageGCPeriod.
IMAGE_GC_PERIOD = 300.0
INVALID_DISK_CAPACITY = "InvalidDiskCapacity"
FREE_DISK_SPACE_FAILED = "FreeDiskSpaceFailed"


@dataclass(frozen=True)
class ImageGCPolicy:
    high_threshold_percent: int = 85
    low_threshold_percent: int = 80
    min_age: float = 120.0
    max_age: float = 0.0


@dataclass
class ImageRecord:
    first_detected: float
    last_used: float
    size: int = 0
    pinned: bool = False
    tags: list[str] = field(default_factory=list)


class ImageGCError(Exception):
    pass


class ImageGCManager:
    def __init__(self, runtime: Runtime, image_service: ImageService,
                 image_fs: Callable[[], Awaitable[FsStats]],
                 policy: ImageGCPolicy | None = None, *, recorder: EventRecorder | None = None,
                 node_ref: object = None, sandbox_image: str = "",
                 clock: Callable[[], float] = time.time) -> None:
        self.runtime = runtime
        self.image_service = image_service
        self.image_fs = image_fs
        self.policy = policy or ImageGCPolicy()
        self.recorder = recorder
        self.node_ref = node_ref
        self.sandbox_image = sandbox_image
        self.clock = clock
        self.records: dict[str, ImageRecord] = {}
        self._lock = asyncio.Lock()

    async def detect_images(self, now: float) -> set[str]:
        """Refresh the records; returns the IDs of images in use."""
        in_use: set[str] = set()
        for pod in await self.runtime.get_pods(all_pods=True):
            for container in pod.containers:
                if container.image_id:
                    in_use.add(container.image_id)
                if container.image_ref:
                    in_use.add(container.image_ref)
        images = await self.image_service.list_images(None)
        seen: set[str] = set()
        for image in images:
            seen.add(image.id)
            record = self.records.get(image.id)
            if record is None:
                record = self.records[image.id] = ImageRecord(first_detected=now, last_used=0.0)
                klog.v(4).info("Image ImageGCManager detected a new image", imageID=image.id)
            if image.id in in_use:
                record.last_used = now
            record.size = int(image.size)
            record.pinned = bool(getattr(image, "pinned", False)) or (
                bool(self.sandbox_image) and self.sandbox_image in image.repo_tags)
            record.tags = list(image.repo_tags)
        for gone in set(self.records) - seen:
            del self.records[gone]
        return in_use

    async def garbage_collect(self) -> int:
        """One pass; returns the bytes freed. Raises ``ImageGCError`` when it fell short."""
        async with self._lock:
            now = self.clock()
            freed = 0
            if self.policy.max_age > 0:
                freed += await self._free_old_images(now)
            stats = await self.image_fs()
            capacity, available = stats.capacity, min(stats.available, stats.capacity)
            if capacity == 0:
                message = "invalid capacity 0 on image filesystem"
                self._event(INVALID_DISK_CAPACITY, message)
                raise ImageGCError(message)
            usage = 100 - (available * 100) // capacity
            if usage < self.policy.high_threshold_percent:
                return freed
            to_free = capacity * (100 - self.policy.low_threshold_percent) // 100 - available
            klog.info("Disk usage on image filesystem is over the high threshold, trying to "
                      "free bytes down to the low threshold", usage=usage,
                      highThreshold=self.policy.high_threshold_percent, amountToFree=to_free,
                      lowThreshold=self.policy.low_threshold_percent)
            released = await self._free_space(to_free, now)
            freed += released
            if released < to_free:
                message = (f"Failed to garbage collect required amount of images. Attempted to "
                           f"free {to_free} bytes, but only found {released} bytes eligible to "
                           f"free.")
                self._event(FREE_DISK_SPACE_FAILED, message)
                raise ImageGCError(message)
            return freed

    async def delete_unused_images(self) -> int:
        """For the eviction manager: every unused image old enough, whatever the disk says."""
        async with self._lock:
            return await self._free_space(None, self.clock())

    async def _free_old_images(self, now: float) -> int:
        in_use = await self.detect_images(now)
        freed = 0
        for image_id, record in list(self.records.items()):
            if image_id in in_use or record.pinned or self._is_sandbox_image(record):
                continue
            unused_since = record.last_used or record.first_detected
            if now - unused_since > self.policy.max_age:
                klog.v(2).info("Removing image to free bytes (unused longer than "
                               "imageMaximumGCAge)", imageID=image_id, size=record.size)
                if await self._remove(image_id):
                    freed += record.size
        return freed

    async def _free_space(self, to_free: int | None, now: float) -> int:
        in_use = await self.detect_images(now)
        candidates = [(image_id, record) for image_id, record in self.records.items()
                      if image_id not in in_use]
        # Least recently used first; never-used images by when they appeared.
        candidates.sort(key=lambda item: (item[1].last_used, item[1].first_detected))
        freed = 0
        for image_id, record in candidates:
            if to_free is not None and freed >= to_free:
                break
            if record.pinned or self._is_sandbox_image(record):
                klog.v(5).info("Image is pinned, skipping garbage collection", imageID=image_id)
                continue
            if now - record.first_detected < self.policy.min_age:
                klog.v(5).info("Image's age is less than the policy's minAge, skipping",
                               imageID=image_id, age=round(now - record.first_detected, 1),
                               minAge=self.policy.min_age)
                continue
            klog.info("Removing image to free bytes", imageID=image_id, size=record.size,
                      tags=",".join(record.tags))
            if await self._remove(image_id):
                freed += record.size
        return freed

    def _is_sandbox_image(self, record: ImageRecord) -> bool:
        return bool(self.sandbox_image) and self.sandbox_image in record.tags

    async def _remove(self, image_id: str) -> bool:
        try:
            await self.image_service.remove_image(image_id)
        except Exception as err:
            klog.error("Failed to remove image", err, imageID=image_id)
            return False
        self.records.pop(image_id, None)
        return True

    def _event(self, reason: str, message: str) -> None:
        klog.error(message)
        if self.recorder is not None and self.node_ref is not None:
            self.recorder.event(self.node_ref, WARNING, reason, message)

    async def run(self, period: float = IMAGE_GC_PERIOD) -> None:
        """Detect images every ``period`` (ages and last use are tracked even while the disk
        is fine, as upstream's image manager does) and collect after each detection after
        the first (supervised)."""
        first = True
        while True:
            try:
                async with self._lock:
                    await self.detect_images(self.clock())
                if not first:
                    await self.garbage_collect()
            except ImageGCError:
                pass  # already logged and recorded as an event
            except Exception as err:
                klog.error("Image garbage collection failed", err)
            first = False
            await asyncio.sleep(period)


__all__ = ["IMAGE_GC_PERIOD", "ImageGCError", "ImageGCManager", "ImageGCPolicy"]
