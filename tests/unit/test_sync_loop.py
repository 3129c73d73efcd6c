"""The sync loop's dispatch, as seed 002's ``syncLoopIteration`` describes it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import V1ObjectMeta, V1Pod

from pykubelet.api.kubetypes import PodOperation, PodUpdate
from pykubelet.container import ContainerID, PodLifecycleEvent, PodLifecycleEventType, ProbeResult
from pykubelet.kubelet.sync_loop import LoopInputs, sync_loop
from pykubelet.prober.results import ResultUpdate
from tests.unit.waiting import ManualClock, settle, until


def pod(uid: str) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name=f"p-{uid}", namespace="default", uid=uid))


class RecordingHandler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.cleanups = 0

    def _record(self, kind: str, pods: list[V1Pod]) -> None:
        self.calls.append((kind, [p.metadata.uid for p in pods]))

    async def handle_pod_additions(self, pods: list[V1Pod]) -> None:
        self._record("add", pods)

    def handle_pod_updates(self, pods: list[V1Pod]) -> None:
        self._record("update", pods)

    def handle_pod_removes(self, pods: list[V1Pod]) -> None:
        self._record("remove", pods)

    def handle_pod_reconcile(self, pods: list[V1Pod]) -> None:
        self._record("reconcile", pods)

    def handle_pod_syncs(self, pods: list[V1Pod]) -> None:
        self._record("sync", pods)

    async def handle_pod_cleanups(self) -> None:
        self.cleanups += 1


class Harness:
    """The loop's inputs as fakes, on a clock that moves only when a test advances it."""

    def __init__(self, **overrides: Any) -> None:
        self.clock = ManualClock()
        self.config: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self.pleg: asyncio.Queue[PodLifecycleEvent] = asyncio.Queue()
        self.probes: dict[str, asyncio.Queue[ResultUpdate]] = {
            kind: asyncio.Queue() for kind in ("liveness", "readiness", "startup")}
        self.known = {"a": pod("a"), "b": pod("b")}
        self.errors: list[str] = []
        self.ready = True
        self.died: list[tuple[str, str]] = []
        self.probe_seen: list[tuple[str, ResultUpdate]] = []
        self.beats = 0
        self.due: list[V1Pod] = []
        fields: dict[str, Any] = {
            "config_updates": self.config, "pleg_events": self.pleg,
            "liveness_updates": self.probes["liveness"],
            "readiness_updates": self.probes["readiness"],
            "startup_updates": self.probes["startup"],
            "runtime_errors": lambda: list(self.errors),
            "pod_by_uid": self.known.get, "pods_to_sync": self._take_due,
            "sources_ready": lambda: self.ready,
            "on_probe_update": lambda kind, update: self.probe_seen.append((kind, update)),
            "on_container_died": lambda uid, cid: self.died.append((uid, cid)),
            "heartbeat": self._beat, "sync_period": 0.05, "housekeeping_period": 0.1,
            "clock": self.clock, "sleep": self.clock.sleep,
        }
        fields.update(overrides)
        self.inputs = LoopInputs(**fields)
        self.handler = RecordingHandler()

    def _beat(self) -> None:
        self.beats += 1

    def _take_due(self) -> list[V1Pod]:
        due, self.due = self.due, []
        return due

    def queues_empty(self) -> bool:
        return all(q.empty() for q in (self.config, self.pleg, *self.probes.values()))

    async def drained(self) -> None:
        """Every queued event taken by the loop and handled."""
        await until(self.queues_empty, what="the loop took every queued event")
        await settle()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        task = asyncio.create_task(sync_loop(self.inputs, self.handler))
        await settle()  # the loop starts, at the clock's time 0
        try:
            yield
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_config_operations_reach_their_handlers_in_order() -> None:
    h = Harness()
    for op in (PodOperation.ADD, PodOperation.UPDATE, PodOperation.RECONCILE,
               PodOperation.DELETE, PodOperation.REMOVE):
        h.config.put_nowait(PodUpdate(pods=[pod("a")], op=op, source="file"))
    async with h.running():
        await h.drained()
    kinds = [kind for kind, _ in h.handler.calls if kind != "sync"]
    # DELETE is a graceful deletion: handled as an update, as upstream.
    assert kinds == ["add", "update", "reconcile", "update", "remove"]


async def test_pleg_events_sync_known_pods_only_and_report_dead_containers() -> None:
    h = Harness()
    h.pleg.put_nowait(PodLifecycleEvent("a", PodLifecycleEventType.CONTAINER_STARTED, "c1"))
    h.pleg.put_nowait(PodLifecycleEvent("zz", PodLifecycleEventType.CONTAINER_DIED, "c2"))
    h.pleg.put_nowait(PodLifecycleEvent("b", PodLifecycleEventType.CONTAINER_REMOVED, "c3"))
    async with h.running():
        await h.drained()
    assert ("sync", ["a"]) in h.handler.calls
    assert all(uids != ["zz"] and uids != ["b"] for _, uids in h.handler.calls)
    assert h.died == [("zz", "c2")]


async def test_sync_ticker_syncs_due_pods() -> None:
    h = Harness()
    h.due = [h.known["b"]]
    async with h.running():
        await settle()
        assert h.handler.calls == []  # not before the tick
        await h.clock.advance(0.05)
        assert ("sync", ["b"]) in h.handler.calls


async def test_housekeeping_waits_for_sources_ready() -> None:
    h = Harness()
    h.ready = False
    async with h.running():
        await h.clock.advance(0.35, step=0.05)
        assert h.handler.cleanups == 0
        h.ready = True
        await h.clock.advance(0.1)
        assert h.handler.cleanups == 1


async def test_after_each_housekeeping_the_pods_it_let_go_may_lose_their_leftovers() -> None:
    """The hook runs after the clean-ups, even failed ones, and not while sources wait."""
    order: list[str] = []
    h = Harness(on_housekeeping_done=lambda: order.append("leftovers"))
    h.ready = False

    async def failing_cleanups() -> None:
        order.append("cleanups")
        raise RuntimeError("runtime listing failed")

    h.handler.handle_pod_cleanups = failing_cleanups  # type: ignore[method-assign]
    async with h.running():
        await h.clock.advance(0.1)
        assert order == []
        h.ready = True
        await h.clock.advance(0.2, step=0.1)
        assert order == ["cleanups", "leftovers"] * 2


async def test_probe_changes_sync_the_pod_but_a_liveness_success_does_not() -> None:
    h = Harness()
    ready = ResultUpdate(ContainerID("containerd", "x"), ProbeResult.SUCCESS, "a")
    alive = ResultUpdate(ContainerID("containerd", "y"), ProbeResult.SUCCESS, "b")
    dead = ResultUpdate(ContainerID("containerd", "y"), ProbeResult.FAILURE, "b")
    h.probes["readiness"].put_nowait(ready)
    h.probes["liveness"].put_nowait(alive)
    async with h.running():
        await h.drained()
        assert h.probe_seen == [("readiness", ready)]
        assert h.handler.calls == [("sync", ["a"])]
        h.probes["liveness"].put_nowait(dead)
        await h.drained()
        assert h.probe_seen[-1] == ("liveness", dead)
        assert h.handler.calls[-1] == ("sync", ["b"])


async def test_runtime_errors_stop_syncing_until_the_runtime_recovers() -> None:
    h = Harness()
    h.errors = ["container runtime is down"]
    h.config.put_nowait(PodUpdate(pods=[pod("a")], op=PodOperation.ADD, source="file"))
    async with h.running():
        await h.clock.advance(1.0, step=0.05)
        assert h.handler.calls == [] and h.beats == 0
        h.errors = []
        # The back-off (100 ms doubling: 0.1, 0.2, 0.4, 0.8 s) ends and the loop resumes.
        await h.clock.advance(0.45, step=0.05)
        assert h.handler.calls == []
        await h.clock.advance(0.05)
        assert ("add", ["a"]) in h.handler.calls and h.beats > 0


@pytest.mark.parametrize("starting", [True, False])
async def test_skipping_during_start_up_is_info_and_an_error_later(
        starting: bool, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(runtime_starting=lambda: starting)
    h.errors = ["PLEG is not healthy: pleg has yet to be successful"]
    logger = logging.getLogger("pykubelet")
    logger.addHandler(caplog.handler)  # propagation may be off after a klog.setup()
    caplog.set_level(logging.DEBUG, logger="pykubelet")
    try:
        async with h.running():
            await h.clock.advance(0.3, step=0.1)
    finally:
        logger.removeHandler(caplog.handler)
    skipped = [r for r in caplog.records if "Skipping pod synchronization" in r.getMessage()]
    assert skipped
    assert {r.levelno for r in skipped} == {logging.INFO if starting else logging.ERROR}
    assert all("pleg has yet to be successful" in r.getMessage() for r in skipped)


async def test_an_update_is_not_lost_when_another_case_wins_the_race() -> None:
    h = Harness()
    for i in range(20):
        h.config.put_nowait(PodUpdate(pods=[pod(str(i))], op=PodOperation.ADD, source="file"))
        h.pleg.put_nowait(PodLifecycleEvent("a", PodLifecycleEventType.CONTAINER_STARTED, str(i)))
    async with h.running():
        await h.drained()
    added = [uids[0] for kind, uids in h.handler.calls if kind == "add"]
    assert added == [str(i) for i in range(20)]
    assert sum(1 for kind, uids in h.handler.calls if kind == "sync" and uids == ["a"]) == 20
