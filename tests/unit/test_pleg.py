"""GenericPLEG against a fake runtime: events per container transition, cache, health."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

import pytest
from cri_api.v1 import api_pb2

from pykubelet.container import (
    Container,
    ContainerID,
    ContainerState,
    ContainerStatus,
    Pod,
    PodLifecycleEvent,
    PodLifecycleEventType,
    PodStatus,
    PodSyncResult,
    RuntimeStatus,
)
from pykubelet.container.cache import PodCache
from pykubelet.pleg import GenericPLEG
from tests.unit.waiting import settle, until

STARTED = PodLifecycleEventType.CONTAINER_STARTED
DIED = PodLifecycleEventType.CONTAINER_DIED
REMOVED = PodLifecycleEventType.CONTAINER_REMOVED


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeRuntime:
    """Answers get_pods/get_pod_status from ``containers``: uid -> {cid: state}."""

    runtime_type = "fake"

    def __init__(self) -> None:
        self.containers: dict[str, dict[str, ContainerState]] = {}
        self.sandbox_ready: dict[str, bool] = {}
        self.ips: dict[str, list[str]] = {}
        self.exit_codes: dict[str, int] = {}
        self.list_error: Exception | None = None
        self.status_errors: dict[str, Exception] = {}
        self.status_calls: list[str] = []

    async def version(self) -> str:
        return "0"

    async def status(self) -> RuntimeStatus:
        return RuntimeStatus()

    async def get_pods(self, all_pods: bool) -> list[Pod]:
        assert all_pods, "PLEG must see exited containers too"
        if self.list_error is not None:
            raise self.list_error
        return [
            Pod(id=uid, name=f"pod-{uid}", namespace="default",
                containers=[Container(ContainerID("fake", cid), name=cid, state=state)
                            for cid, state in containers.items()])
            for uid, containers in self.containers.items()
        ]

    async def get_pod_status(self, uid: str, name: str, namespace: str) -> PodStatus:
        self.status_calls.append(uid)
        if uid in self.status_errors:
            raise self.status_errors[uid]
        sandboxes = []
        if uid in self.sandbox_ready:
            state = api_pb2.SANDBOX_READY if self.sandbox_ready[uid] else api_pb2.SANDBOX_NOTREADY
            sandboxes.append(api_pb2.PodSandboxStatus(id=f"sb-{uid}", state=state))
        return PodStatus(
            id=uid, name=name, namespace=namespace, ips=list(self.ips.get(uid, [])),
            sandbox_statuses=sandboxes,
            container_statuses=[
                ContainerStatus(ContainerID("fake", cid), name=cid, state=state,
                                exit_code=self.exit_codes.get(cid, 0))
                for cid, state in self.containers.get(uid, {}).items()
            ])

    async def sync_pod(self, pod: Any, status: PodStatus,
                       pull_secrets: Sequence[object] = ()) -> PodSyncResult:
        raise AssertionError("PLEG never syncs pods")

    async def kill_pod(self, pod: Any, running: Pod, grace_period_override: int | None = None
                       ) -> None:
        raise AssertionError("PLEG never kills pods")


def drain(queue: asyncio.Queue[PodLifecycleEvent]) -> list[tuple[str, PodLifecycleEventType, str]]:
    events = []
    while not queue.empty():
        e = queue.get_nowait()
        events.append((e.pod_uid, e.type, e.data))
    return events


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache() -> PodCache:
    return PodCache()


@pytest.fixture
def pleg(runtime: FakeRuntime, cache: PodCache, clock: FakeClock) -> GenericPLEG:
    return GenericPLEG(runtime, cache, relist_period=0.01, relist_threshold=180.0, clock=clock)


async def test_created_then_running_is_one_started_event(pleg: GenericPLEG,
                                                         runtime: FakeRuntime) -> None:
    runtime.containers["p1"] = {"c1": ContainerState.CREATED}
    await pleg.relist()
    assert drain(pleg.watch()) == []  # "created" is not reported: nobody acts on it
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
    await pleg.relist()
    assert drain(pleg.watch()) == [("p1", STARTED, "c1")]
    await pleg.relist()
    assert drain(pleg.watch()) == []


async def test_running_exited_removed(pleg: GenericPLEG, runtime: FakeRuntime) -> None:
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
    await pleg.relist()
    assert drain(pleg.watch()) == [("p1", STARTED, "c1")]
    runtime.containers["p1"] = {"c1": ContainerState.EXITED}
    await pleg.relist()
    assert drain(pleg.watch()) == [("p1", DIED, "c1")]
    runtime.containers["p1"] = {}
    await pleg.relist()
    assert drain(pleg.watch()) == [("p1", REMOVED, "c1")]


async def test_running_container_vanishing_reports_died_then_removed(
        pleg: GenericPLEG, runtime: FakeRuntime) -> None:
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING, "c2": ContainerState.RUNNING}
    await pleg.relist()
    drain(pleg.watch())
    del runtime.containers["p1"]
    await pleg.relist()
    events = drain(pleg.watch())
    assert sorted(events) == sorted([("p1", DIED, "c1"), ("p1", REMOVED, "c1"),
                                     ("p1", DIED, "c2"), ("p1", REMOVED, "c2")])
    assert events.index(("p1", DIED, "c1")) < events.index(("p1", REMOVED, "c1"))


async def test_cache_follows_the_runtime(pleg: GenericPLEG, runtime: FakeRuntime,
                                         cache: PodCache, clock: FakeClock) -> None:
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
    await pleg.relist()
    status, err = cache.get("p1")
    assert err is None and status is not None
    assert [(c.id.id, c.state) for c in status.container_statuses] == [
        ("c1", ContainerState.RUNNING)]
    assert cache.timestamp == clock.now

    # A waiting pod worker is released by the next relist even if its pod did not change.
    clock.now += 1
    waiter = asyncio.ensure_future(cache.get_newer_than("p1", clock.now - 0.5))
    await asyncio.sleep(0)
    assert not waiter.done()
    await pleg.relist()
    await asyncio.wait_for(waiter, 1)

    runtime.containers["p1"] = {"c1": ContainerState.EXITED}
    runtime.exit_codes["c1"] = 3
    await pleg.relist()
    status, _ = cache.get("p1")
    assert status is not None and status.container_statuses[0].exit_code == 3

    del runtime.containers["p1"]
    await pleg.relist()
    status, _ = cache.get("p1")
    assert status is not None and status.container_statuses == []


async def test_unchanged_pods_are_not_inspected(pleg: GenericPLEG,
                                                runtime: FakeRuntime) -> None:
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
    await pleg.relist()
    runtime.status_calls.clear()
    await pleg.relist()
    await pleg.relist()
    assert runtime.status_calls == []


async def test_failed_status_fetch_is_retried_and_events_redelivered(
        pleg: GenericPLEG, runtime: FakeRuntime, cache: PodCache) -> None:
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
    runtime.status_errors["p1"] = RuntimeError("runtime busy")
    await pleg.relist()
    assert drain(pleg.watch()) == []
    status, err = cache.get("p1")
    assert status is None and isinstance(err, RuntimeError)

    del runtime.status_errors["p1"]
    runtime.status_calls.clear()
    await pleg.relist()
    assert runtime.status_calls == ["p1"]
    assert drain(pleg.watch()) == [("p1", STARTED, "c1")]
    status, err = cache.get("p1")
    assert err is None and status is not None and status.container_statuses

    runtime.status_calls.clear()
    await pleg.relist()
    assert runtime.status_calls == []


async def test_pod_ips_survive_network_teardown(pleg: GenericPLEG, runtime: FakeRuntime,
                                                cache: PodCache) -> None:
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
    runtime.sandbox_ready["p1"] = True
    runtime.ips["p1"] = ["10.88.0.7"]
    await pleg.relist()
    runtime.containers["p1"] = {"c1": ContainerState.EXITED}
    runtime.sandbox_ready["p1"] = False
    runtime.ips["p1"] = []
    await pleg.relist()
    status, _ = cache.get("p1")
    assert status is not None and status.ips == ["10.88.0.7"]


async def test_full_channel_drops_events_without_blocking(runtime: FakeRuntime, cache: PodCache,
                                                          clock: FakeClock) -> None:
    pleg = GenericPLEG(runtime, cache, clock=clock, channel_capacity=2)
    runtime.containers = {f"p{i}": {f"c{i}": ContainerState.RUNNING} for i in range(5)}
    await asyncio.wait_for(pleg.relist(), 1)
    assert pleg.watch().qsize() == 2
    assert pleg.discarded_events == 3
    status, _ = cache.get("p4")
    assert status is not None and status.container_statuses  # cache still updated


async def test_health_tracks_last_successful_relist(pleg: GenericPLEG, runtime: FakeRuntime,
                                                    clock: FakeClock) -> None:
    healthy, message = pleg.healthy()
    assert not healthy and "yet to be successful" in message
    await pleg.relist()
    assert pleg.healthy() == (True, "")
    assert pleg.relist_count == 1

    runtime.list_error = RuntimeError("containerd down")
    clock.now += 179
    await pleg.relist()
    assert pleg.healthy()[0]
    clock.now += 2
    await pleg.relist()
    healthy, message = pleg.healthy()
    assert not healthy
    assert "last seen active 181" in message and "threshold is 180" in message
    assert pleg.relist_count == 1

    runtime.list_error = None
    await pleg.relist()
    assert pleg.healthy() == (True, "")


async def test_run_relists_periodically_until_cancelled(runtime: FakeRuntime,
                                                         cache: PodCache) -> None:
    pleg = GenericPLEG(runtime, cache, relist_period=0.01)
    task = asyncio.create_task(pleg.run())
    runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
    event = await asyncio.wait_for(pleg.watch().get(), 10)
    assert (event.pod_uid, event.type, event.data) == ("p1", STARTED, "c1")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    count = pleg.relist_count
    await settle()
    assert pleg.relist_count == count
    assert pleg.healthy()[0]


async def test_a_requested_relist_does_not_wait_for_the_period(runtime: FakeRuntime,
                                                               cache: PodCache) -> None:
    pleg = GenericPLEG(runtime, cache, relist_period=60.0)
    task = asyncio.create_task(pleg.run())
    try:
        await until_relisted(pleg, 1)
        runtime.containers["p1"] = {"c1": ContainerState.RUNNING}
        await settle()
        assert pleg.relist_count == 1  # the next periodic relist is a minute away
        # A pod worker that cannot wait: the cache asks its writer for a relist.
        reader = asyncio.ensure_future(cache.get_newer_than("p1", time.monotonic(),
                                                            refresh=True))
        status, _ = await asyncio.wait_for(reader, 1)
        assert pleg.relist_count == 2
        assert status is not None and [c.id.id for c in status.container_statuses] == ["c1"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until_relisted(pleg: GenericPLEG, count: int) -> None:
    await until(lambda: pleg.relist_count >= count, what=f"{count} relists")
