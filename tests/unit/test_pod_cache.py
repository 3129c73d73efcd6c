"""PodCache: freshness-gated reads are what keep pod workers from acting on stale state."""

from __future__ import annotations

import asyncio

from pykubelet.container import PodStatus
from pykubelet.container.cache import PodCache
from tests.unit.waiting import settle


def test_unknown_pod_reads_as_empty_status() -> None:
    cache = PodCache()
    status, err = cache.get("uid-1")
    assert err is None
    assert status is not None
    assert status.id == "uid-1"
    assert status.container_statuses == []


def test_set_keeps_status_and_error() -> None:
    cache = PodCache()
    failure = RuntimeError("inspect failed")
    assert cache.set("a", PodStatus(id="a", ips=["10.0.0.2"]), None, 5.0)
    assert cache.set("b", None, failure, 5.0)
    status, err = cache.get("a")
    assert status is not None and status.ips == ["10.0.0.2"] and err is None
    assert cache.get("b") == (None, failure)
    assert [s.id for s in cache.get_all()] == ["a"]


def test_set_ignores_data_older_than_cached() -> None:
    cache = PodCache()
    cache.set("a", PodStatus(id="a", ips=["new"]), None, 10.0)
    assert not cache.set("a", PodStatus(id="a", ips=["old"]), None, 9.0)
    status, _ = cache.get("a")
    assert status is not None and status.ips == ["new"]


def test_delete_forgets_the_pod() -> None:
    cache = PodCache()
    cache.set("a", PodStatus(id="a", ips=["10.0.0.2"]), None, 1.0)
    cache.delete("a")
    status, _ = cache.get("a")
    assert status is not None and status.ips == []


async def test_get_newer_than_returns_at_once_when_entry_is_newer() -> None:
    cache = PodCache()
    cache.set("a", PodStatus(id="a", name="web"), None, 10.0)
    status, err = await asyncio.wait_for(cache.get_newer_than("a", 5.0), 1)
    assert status is not None and status.name == "web" and err is None


async def test_get_newer_than_waits_for_a_newer_set() -> None:
    cache = PodCache()
    cache.set("a", PodStatus(id="a", name="old"), None, 1.0)
    reader = asyncio.ensure_future(cache.get_newer_than("a", 5.0))
    await settle()
    assert not reader.done()
    cache.set("a", PodStatus(id="a", name="older-still"), None, 3.0)  # not new enough
    await settle()
    assert not reader.done()
    cache.set("a", PodStatus(id="a", name="fresh"), None, 6.0)
    status, _ = await asyncio.wait_for(reader, 1)
    assert status is not None and status.name == "fresh"


async def test_get_newer_than_wakes_on_global_timestamp() -> None:
    cache = PodCache()
    cache.set("a", PodStatus(id="a", name="unchanged"), None, 1.0)
    reader = asyncio.ensure_future(cache.get_newer_than("a", 5.0))
    unknown = asyncio.ensure_future(cache.get_newer_than("never-seen", 5.0))
    await settle()
    cache.update_time(4.0)
    await settle()
    assert not reader.done() and not unknown.done()
    cache.update_time(7.0)
    status, _ = await asyncio.wait_for(reader, 1)
    assert status is not None and status.name == "unchanged"
    empty, _ = await asyncio.wait_for(unknown, 1)
    assert empty is not None and empty.id == "never-seen"


async def test_get_newer_than_blocks_before_first_relist() -> None:
    cache = PodCache()
    reader = asyncio.ensure_future(cache.get_newer_than("a", 0.0))
    await settle()
    assert not reader.done()
    reader.cancel()



async def test_a_reader_that_must_wait_can_ask_for_a_refresh() -> None:
    cache = PodCache()
    asked: list[str] = []
    cache.set_refresher(lambda: asked.append("now"))
    cache.set("a", PodStatus(id="a", name="fresh"), None, 10.0)
    await asyncio.wait_for(cache.get_newer_than("a", 5.0, refresh=True), 1)
    assert asked == []  # fresh enough: nothing to ask for

    plain = asyncio.ensure_future(cache.get_newer_than("a", 20.0))
    await settle()
    assert asked == []
    hurried = asyncio.ensure_future(cache.get_newer_than("a", 20.0, refresh=True))
    await settle()
    assert asked == ["now"] and not hurried.done()
    cache.update_time(21.0)
    await asyncio.wait_for(asyncio.gather(plain, hurried), 1)
