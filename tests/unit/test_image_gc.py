"""Image GC decisions: thresholds, least recently used first, in-use/pinned/young images kept."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from cri_api.v1 import api_pb2

from pykubelet.container import Container, ContainerID, ContainerState, Pod
from pykubelet.images import ImageGCError, ImageGCManager, ImageGCPolicy
from pykubelet.stats import FsStats

MiB = 2**20


@dataclass
class FakeImages:
    images: dict[str, api_pb2.Image] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def add(self, image_id: str, size: int, tag: str, pinned: bool = False) -> None:
        self.images[image_id] = api_pb2.Image(id=image_id, size=size, repo_tags=[tag],
                                              pinned=pinned)

    async def list_images(self, _filter: object = None) -> list[api_pb2.Image]:
        return list(self.images.values())

    async def remove_image(self, image: str) -> None:
        self.removed.append(image)
        self.images.pop(image, None)


@dataclass
class FakeRuntime:
    using: list[str] = field(default_factory=list)

    async def get_pods(self, all_pods: bool) -> list[Pod]:
        containers = [Container(id=ContainerID("containerd", f"c{i}"), name=f"c{i}",
                                image="", image_id=image_id, state=ContainerState.EXITED)
                      for i, image_id in enumerate(self.using)]
        return [Pod(id="uid", name="p", namespace="default", containers=containers)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(images: FakeImages, runtime: FakeRuntime, clock: Clock, available: list[int],
         **policy: float) -> ImageGCManager:
    async def image_fs() -> FsStats:
        # Each removal frees what the image took: the fake disk follows the fake images.
        used = sum(i.size for i in images.images.values())
        return FsStats(capacity=1000 * MiB, available=available[0] - used, inodes=0,
                       inodes_free=0)
    return ImageGCManager(runtime, images, image_fs,  # type: ignore[arg-type]
                          ImageGCPolicy(**policy),  # type: ignore[arg-type]
                          sandbox_image="pause:3.9", clock=clock)


async def test_below_the_high_threshold_nothing_is_removed() -> None:
    images, clock = FakeImages(), Clock()
    images.add("sha256:old", 100 * MiB, "old:1")
    manager = make(images, FakeRuntime(), clock, [1000 * MiB], min_age=0)
    assert await manager.garbage_collect() == 0
    assert images.removed == []


async def test_least_recently_used_unused_images_go_until_the_low_threshold() -> None:
    images, runtime, clock = FakeImages(), FakeRuntime(), Clock()
    for name in ("a", "b", "c"):
        images.add(f"sha256:{name}", 100 * MiB, f"{name}:1")
    images.add("sha256:used", 100 * MiB, "used:1")
    images.add("sha256:pause", 1 * MiB, "pause:3.9")
    images.add("sha256:pinned", 100 * MiB, "pinned:1", pinned=True)
    manager = make(images, runtime, clock, [650 * MiB],
                   high_threshold_percent=80, low_threshold_percent=70, min_age=0)
    # "c" used at t0, "a" at t1, "b" never: b (never used) goes first, then c, then a.
    runtime.using = ["sha256:c", "sha256:used"]
    await manager.detect_images(clock.now)
    clock.now += 10
    runtime.using = ["sha256:a", "sha256:used"]
    await manager.detect_images(clock.now)
    clock.now += 10
    runtime.using = ["sha256:used"]
    # 501 MiB of images leave 149 MiB free: 86% used, 151 MiB to free for 70%.
    freed = await manager.garbage_collect()
    assert images.removed == ["sha256:b", "sha256:c"]
    assert freed == 200 * MiB
    assert "sha256:used" in images.images and "sha256:pause" in images.images


async def test_young_images_are_kept_and_shortfall_is_an_error() -> None:
    images, clock = FakeImages(), Clock()
    images.add("sha256:new", 100 * MiB, "new:1")
    manager = make(images, FakeRuntime(), clock, [100 * MiB], min_age=120,
                   high_threshold_percent=50, low_threshold_percent=40)
    with pytest.raises(ImageGCError, match="Failed to garbage collect required amount of images"):
        await manager.garbage_collect()
    assert images.removed == []
    clock.now += 121
    with pytest.raises(ImageGCError):  # the disk is still too full once it is gone
        await manager.garbage_collect()
    assert images.removed == ["sha256:new"]


async def test_maximum_age_removes_long_unused_images_whatever_the_disk() -> None:
    images, runtime, clock = FakeImages(), FakeRuntime(["sha256:used"]), Clock()
    images.add("sha256:stale", 10 * MiB, "stale:1")
    images.add("sha256:used", 10 * MiB, "used:1")
    manager = make(images, runtime, clock, [1000 * MiB], min_age=0, max_age=60)
    await manager.detect_images(clock.now)
    clock.now += 61
    await manager.garbage_collect()
    assert images.removed == ["sha256:stale"]


async def test_zero_capacity_is_reported() -> None:
    images, clock = FakeImages(), Clock()

    async def empty() -> FsStats:
        return FsStats(0, 0, 0, 0)
    manager = ImageGCManager(FakeRuntime(), images, empty, clock=clock)  # type: ignore[arg-type]
    with pytest.raises(ImageGCError, match="invalid capacity 0 on image filesystem"):
        await manager.garbage_collect()
