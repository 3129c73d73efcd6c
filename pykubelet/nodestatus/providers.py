"""What the node status asks the container runtime: its images and its version, cached.

Upstream reads both through kubelet modules that cache them (the image
manager refreshes its image list every 30 seconds); the node status runs its
setters every 10 seconds and, right after start-up, every 100 ms, so these
small caches keep those runs from turning into CRI calls each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pykubelet.cri import ImageService, RuntimeService
from pykubelet.nodestatus.setters import Image

IMAGE_LIST_TTL = 30.0
RUNTIME_VERSION_TTL = 60.0


class CRIImageList:
    """``status.images`` from CRI ``ListImages``, refreshed at most every 30 seconds."""

    def __init__(self, image_service: ImageService, ttl: float = IMAGE_LIST_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._images = image_service
        self._ttl = ttl
        self._clock = clock
        self._cached: list[Image] | None = None
        self._at = 0.0

    async def __call__(self) -> list[Image]:
        if self._cached is None or self._clock() - self._at >= self._ttl:
            listed = await self._images.list_images()
            self._cached = [Image(names=(*image.repo_digests, *image.repo_tags),
                                  size_bytes=int(image.size)) for image in listed]
            self._at = self._clock()
        return list(self._cached)


class CRIRuntimeVersion:
    """(runtime name, runtime version) from CRI ``Version``, asked again every minute."""

    def __init__(self, runtime_service: RuntimeService, ttl: float = RUNTIME_VERSION_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._runtime = runtime_service
        self._ttl = ttl
        self._clock = clock
        self._cached: tuple[str, str] | None = None
        self._at = 0.0

    async def __call__(self) -> tuple[str, str]:
        if self._cached is None or self._clock() - self._at >= self._ttl:
            response = await self._runtime.version()
            self._cached = (response.runtime_name, response.runtime_version)
            self._at = self._clock()
        return self._cached


__all__ = ["CRIImageList", "CRIRuntimeVersion"]
