"""The reflector keeps a store current across dropped watches and compaction (410)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.api.kubetypes import PodOperation, PodUpdate
from pykubelet.sources.apiserver import ApiserverPodSource
from pykubelet.util.reflector import (
    ApiListWatch,
    GoneError,
    Object,
    Reflector,
    WatchEvent,
)
from tests.unit.loopback import serve
from tests.unit.waiting import ManualClock


def pod(name: str, rv: str, uid: str | None = None) -> Object:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "resourceVersion": rv},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


class Script:
    """A ListerWatcher whose answers are scripted per call; records what was asked."""

    def __init__(self, lists: list[Any], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.list_calls: list[str] = []
        self.watch_calls: list[str] = []
        self.done = asyncio.Event()

    async def list(self, resource_version: str) -> tuple[list[Object], str]:
        self.list_calls.append(resource_version)
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch(self, resource_version: str,
                    timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def replace(self, objects: list[Object], resource_version: str) -> None:
        self.calls.append(("replace", sorted(o["metadata"]["name"] for o in objects)))

    def add(self, obj: Object) -> None:
        self.calls.append(("add", obj["metadata"]["name"]))

    def update(self, obj: Object) -> None:
        self.calls.append(("update", obj["metadata"]["name"]))

    def delete(self, obj: Object) -> None:
        self.calls.append(("delete", obj["metadata"]["name"]))


async def run_until_done(script: Script, store: Any) -> tuple[Reflector, list[float]]:
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)

    reflector = Reflector("test", script, store, sleep=fake_sleep, rand=lambda: 0.0)
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(script.done.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return reflector, sleeps


async def test_list_then_watch_events_reach_the_store_in_order() -> None:
    script = Script(
        lists=[([pod("a", "5")], "10")],
        watches=[[WatchEvent("ADDED", pod("b", "11")), WatchEvent("MODIFIED", pod("a", "12")),
                  WatchEvent("DELETED", pod("b", "13")),
                  WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "20"}})]])
    store = Recorder()
    reflector, _ = await run_until_done(script, store)
    assert store.calls == [("replace", ["a"]), ("add", "b"), ("update", "a"), ("delete", "b")]
    # The first list reads the watch cache; the watch resumes after the bookmark.
    assert script.list_calls == ["0"]
    assert script.watch_calls == ["10", "20"]
    assert reflector.last_sync_resource_version == "20"


async def test_a_dropped_watch_resumes_from_the_last_version_without_relisting() -> None:
    script = Script(
        lists=[([], "10")],
        watches=[[WatchEvent("ADDED", pod("a", "11")), aiohttp.ServerDisconnectedError()],
                 [aiohttp.ClientConnectionError("connection refused")],
                 [WatchEvent("MODIFIED", pod("a", "15"))]])
    store = Recorder()
    _, sleeps = await run_until_done(script, store)
    assert script.list_calls == ["0"]
    assert script.watch_calls == ["10", "11", "11", "15"]
    assert store.calls == [("replace", []), ("add", "a"), ("update", "a")]
    # Consecutive failures back off exponentially.
    assert sleeps == [0.8, 1.6]


async def test_gone_during_the_watch_relists_from_storage_and_replaces_the_store() -> None:
    gone = WatchEvent("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                                "message": "too old resource version: 10 (20)"})
    script = Script(
        lists=[([pod("a", "5")], "10"), ([pod("b", "25")], "30")],
        watches=[[gone], [WatchEvent("ADDED", pod("c", "31"))]])
    store = Recorder()
    await run_until_done(script, store)
    # The relist after a 410 is a consistent read (""), not the watch cache ("0").
    assert script.list_calls == ["0", ""]
    assert script.watch_calls == ["10", "30", "31"]
    assert store.calls == [("replace", ["a"]), ("replace", ["b"]), ("add", "c")]


async def test_an_expired_list_version_is_retried_at_once_as_a_consistent_read() -> None:
    script = Script(lists=[([], "10"), GoneError("expired"), ([pod("a", "40")], "40")],
                    watches=[[ApiException(status=403, reason="Forbidden")]])
    store = Recorder()
    _, sleeps = await run_until_done(script, store)
    # The relist after the refused watch asks for "10", gets 410, and reads "" right away.
    assert script.list_calls == ["0", "10", ""]
    assert sleeps == [0.8]
    assert store.calls == [("replace", []), ("replace", ["a"])]


async def test_list_failures_back_off_and_retry() -> None:
    script = Script(lists=[ApiException(status=503), ApiException(status=503), ([], "7")],
                    watches=[])
    store = Recorder()
    _, sleeps = await run_until_done(script, store)
    assert script.list_calls == ["0", "0", "0"]
    assert sleeps == [0.8, 1.6]
    assert store.calls == [("replace", [])]


async def test_a_forbidden_watch_relists_after_backing_off() -> None:
    script = Script(lists=[([], "10"), ([], "12")],
                    watches=[[ApiException(status=403, reason="Forbidden")]])
    store = Recorder()
    _, sleeps = await run_until_done(script, store)
    assert script.list_calls == ["0", "10"]
    assert sleeps == [0.8]


async def test_the_pod_source_sends_a_set_per_list_and_one_update_per_event() -> None:
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    script = Script(lists=[([pod("a", "5"), pod("b", "6")], "10")],
                    watches=[[WatchEvent("ADDED", pod("c", "11")),
                              WatchEvent("MODIFIED", pod("a", "12")),
                              WatchEvent("DELETED", pod("b", "13"))]])
    source = ApiserverPodSource(script, updates, sleep=lambda _: asyncio.sleep(0))
    task = asyncio.create_task(source.run())
    await asyncio.wait_for(script.done.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    got = []
    while not updates.empty():
        update = updates.get_nowait()
        got.append((update.op, update.source, [p.metadata.name for p in update.pods]))
    assert got == [(PodOperation.SET, "api", ["a", "b"]), (PodOperation.ADD, "api", ["c"]),
                   (PodOperation.UPDATE, "api", ["a"]), (PodOperation.REMOVE, "api", ["b"])]


async def test_the_pod_source_waits_for_the_node_informer() -> None:
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    synced = False
    script = Script(lists=[([], "1")], watches=[])
    clock = ManualClock()
    source = ApiserverPodSource(script, updates, node_has_synced=lambda: synced,
                                sleep=clock.sleep)
    task = asyncio.create_task(source.run())
    await clock.advance(3, step=1)  # it looked three times more
    assert script.list_calls == []
    synced = True
    await clock.advance(1)
    await asyncio.wait_for(script.done.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert script.list_calls == ["0"]


# --- the wire format, against a local HTTP server -------------------------------------------


async def test_api_list_watch_reads_lists_and_newline_framed_watch_events() -> None:
    seen: list[dict[str, str]] = []
    big = pod("big", "12")
    big["metadata"]["annotations"] = {"x": "y" * 300_000}  # larger than aiohttp's line limit

    async def pods(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.query))
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": "10"},
                                      "items": [pod("a", "9")]})
        response = web.StreamResponse()
        await response.prepare(request)
        for event in (WatchEvent("ADDED", pod("b", "11")), WatchEvent("MODIFIED", big)):
            frame = json.dumps({"type": event.type, "object": event.object}).encode() + b"\n"
            # Split a frame across writes, as TCP may.
            await response.write(frame[:7])
            await response.write(frame[7:])
        return response

    app = web.Application()
    app.router.add_get("/pods", pods)
    async with serve(app) as port, aiohttp.ClientSession() as session:
        async def list_call(**kwargs: Any) -> aiohttp.ClientResponse:
            query = {"fieldSelector": kwargs["field_selector"],
                     "resourceVersion": kwargs["resource_version"]}
            if kwargs.get("watch"):
                query |= {"watch": "true", "timeoutSeconds": str(kwargs["timeout_seconds"]),
                          "allowWatchBookmarks": "true"}
            return await session.get(f"http://127.0.0.1:{port}/pods", params=query)

        lw = ApiListWatch(list_call, field_selector="spec.nodeName=n1")
        items, version = await lw.list("0")
        events = [event async for event in lw.watch(version, 300)]
    assert [i["metadata"]["name"] for i in items] == ["a"]
    assert version == "10"
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"), ("MODIFIED", "big")]
    assert seen[0] == {"fieldSelector": "spec.nodeName=n1", "resourceVersion": "0"}
    assert seen[1]["resourceVersion"] == "10" and seen[1]["watch"] == "true"


async def test_api_list_watch_turns_410_into_gone() -> None:
    async def gone(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "code": 410, "reason": "Expired",
                                  "message": "too old resource version"}, status=410)

    app = web.Application()
    app.router.add_get("/pods", gone)
    async with serve(app) as port, aiohttp.ClientSession() as session:
        async def list_call(**kwargs: Any) -> aiohttp.ClientResponse:
            return await session.get(f"http://127.0.0.1:{port}/pods")

        lw = ApiListWatch(list_call)
        with pytest.raises(GoneError, match="too old"):
            await lw.list("5")
        with pytest.raises(GoneError):
            async for _ in lw.watch("5", 300):
                pass
