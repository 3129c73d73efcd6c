"""PodWorkers against a fake PodSyncer: serialisation, coalescing and the pod lifecycle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio.client import V1ObjectMeta, V1Pod, V1PodSpec, V1PodStatus

from pykubelet.api.kubetypes import SyncPodType
from pykubelet.container import Pod, PodStatus
from pykubelet.container.cache import PodCache
from pykubelet.podworkers import (
    KillPodOptions,
    PodWorkers,
    PodWorkerState,
    UpdatePodOptions,
    WorkQueue,
)
from tests.unit import waiting
from tests.unit.waiting import settle


def make_pod(uid: str, version: str = "v1", *, name: str | None = None, static: bool = False,
             deleting_grace: int | None = None, phase: str | None = None,
             grace: int = 30) -> V1Pod:
    annotations = {"kubernetes.io/config.source": "file" if static else "api"}
    meta = V1ObjectMeta(uid=uid, name=name or f"pod-{uid}", namespace="default",
                        labels={"version": version}, annotations=annotations)
    if deleting_grace is not None:
        meta.deletion_timestamp = datetime.now(UTC)
        meta.deletion_grace_period_seconds = deleting_grace
    spec = V1PodSpec(containers=[], termination_grace_period_seconds=grace)
    return V1Pod(metadata=meta, spec=spec, status=V1PodStatus(phase=phase))


def version_of(pod: V1Pod) -> str:
    return str(pod.metadata.labels["version"])


class FakeSyncer:
    """Records every call; sync_pod can be held on a gate, fail, or report terminal."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, Any]] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.sync_errors: dict[str, list[Exception]] = {}
        self.terminating_errors: dict[str, list[Exception]] = {}
        self.terminal: set[str] = set()
        self.running: dict[str, int] = {}
        self.max_running: dict[str, int] = {}

    def calls(self, kind: str, uid: str | None = None) -> list[Any]:
        return [detail for k, u, detail in self.log if k == kind and uid in (None, u)]

    def kinds(self, uid: str) -> list[str]:
        return [k for k, u, _ in self.log if u == uid]

    async def _enter(self, uid: str) -> None:
        self.running[uid] = self.running.get(uid, 0) + 1
        self.max_running[uid] = max(self.max_running.get(uid, 0), self.running[uid])
        gate = self.gates.get(uid)
        if gate is not None:
            await gate.wait()

    async def sync_pod(self, update_type: SyncPodType, pod: V1Pod, mirror_pod: V1Pod | None,
                       pod_status: PodStatus) -> bool:
        uid = pod.metadata.uid
        self.log.append(("sync_pod", uid, (update_type, version_of(pod))))
        try:
            await self._enter(uid)
            errors = self.sync_errors.get(uid)
            if errors:
                raise errors.pop(0)
            return uid in self.terminal
        except asyncio.CancelledError:
            self.log.append(("sync_pod_cancelled", uid, None))
            raise
        finally:
            self.running[uid] -= 1
            self.log.append(("sync_pod_end", uid, None))

    async def sync_terminating_pod(self, pod: V1Pod, pod_status: PodStatus,
                                   grace_period: int | None) -> None:
        uid = pod.metadata.uid
        self.log.append(("sync_terminating_pod", uid, grace_period))
        errors = self.terminating_errors.get(uid)
        if errors:
            raise errors.pop(0)

    async def sync_terminating_runtime_pod(self, running_pod: Pod) -> None:
        self.log.append(("sync_terminating_runtime_pod", running_pod.id, running_pod.name))

    async def sync_terminated_pod(self, pod: V1Pod, pod_status: PodStatus) -> None:
        self.log.append(("sync_terminated_pod", pod.metadata.uid, None))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def until(condition: Callable[[], object]) -> None:
    """Until the syncer saw ``condition``, and the workers did what follows it (requeue, forget)."""
    await waiting.until(condition)
    await settle()


@pytest.fixture
def syncer() -> FakeSyncer:
    return FakeSyncer()


@pytest.fixture
def cache() -> PodCache:
    return PodCache()


@pytest.fixture
async def fresh_cache(cache: PodCache) -> AsyncIterator[PodCache]:
    """Plays PLEG: the cache is declared fresh at every pass of the event loop."""

    async def relist() -> None:
        while True:
            cache.update_time(time.monotonic())
            await asyncio.sleep(0)

    task = asyncio.ensure_future(relist())
    yield cache
    task.cancel()


@pytest.fixture
def queue_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def workers(syncer: FakeSyncer, fresh_cache: PodCache,
                  queue_clock: FakeClock) -> AsyncIterator[PodWorkers]:
    pod_workers = PodWorkers(syncer, fresh_cache, resync_interval=60.0, backoff_period=10.0,
                             work_queue=WorkQueue(queue_clock))
    yield pod_workers
    await pod_workers.stop()


@pytest.fixture
async def relist_workers(syncer: FakeSyncer, cache: PodCache) -> AsyncIterator[PodWorkers]:
    """Workers on a cache that only the test's own relists make fresh."""
    pod_workers = PodWorkers(syncer, cache, resync_interval=60.0, backoff_period=10.0)
    yield pod_workers
    await pod_workers.stop()


@pytest.fixture
def requested_relists(cache: PodCache) -> list[float]:
    """Plays a PLEG that relists when asked to (and only then): the times it was asked."""
    refreshes: list[float] = []

    def refresh() -> None:
        refreshes.append(time.monotonic())
        cache.update_time(time.monotonic())

    cache.set_refresher(refresh)
    return refreshes


def update(pod: V1Pod, kind: SyncPodType = SyncPodType.UPDATE, **kwargs: Any) -> UpdatePodOptions:
    return UpdatePodOptions(update_type=kind, pod=pod, **kwargs)


async def start_and_sync_again(workers: PodWorkers, syncer: FakeSyncer, uid: str) -> None:
    """A new pod synced, then synced again on the fresh look its first sync asks for: from
    here on its syncs wait for relists."""
    workers.update_pod(update(make_pod(uid), SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", uid)) == 1)
    workers.update_pod(update(make_pod(uid)))
    await until(lambda: len(syncer.calls("sync_pod_end", uid)) == 2)


async def test_updates_are_serialised_and_coalesced(workers: PodWorkers,
                                                    syncer: FakeSyncer) -> None:
    gate = syncer.gates["a"] = asyncio.Event()
    workers.update_pod(update(make_pod("a", "v0"), SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod")) == 1)
    for n in range(1, 6):
        workers.update_pod(update(make_pod("a", f"v{n}")))
    await settle()
    assert len(syncer.calls("sync_pod")) == 1  # nothing overtakes the running sync
    gate.set()
    await until(lambda: len(syncer.calls("sync_pod_end")) == 2)
    await settle()
    assert syncer.calls("sync_pod") == [(SyncPodType.CREATE, "v0"), (SyncPodType.UPDATE, "v5")]
    assert syncer.max_running["a"] == 1
    assert workers.active_pod("a") is not None
    assert version_of(workers.active_pod("a")) == "v5"  # type: ignore[arg-type]


async def test_different_pods_sync_concurrently(workers: PodWorkers, syncer: FakeSyncer) -> None:
    gate = asyncio.Event()
    syncer.gates["a"] = syncer.gates["b"] = gate
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    workers.update_pod(update(make_pod("b"), SyncPodType.CREATE))
    await until(lambda: syncer.running.get("a") == 1 and syncer.running.get("b") == 1)
    gate.set()
    await until(lambda: len(syncer.calls("sync_pod_end")) == 2)


async def test_kill_during_sync_terminates_after_the_sync_ends(workers: PodWorkers,
                                                               syncer: FakeSyncer) -> None:
    syncer.gates["a"] = asyncio.Event()  # never released: a sync stuck pulling an image
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    await until(lambda: syncer.running.get("a") == 1)
    assert workers.could_have_running_containers("a")

    workers.update_pod(update(make_pod("a"), SyncPodType.KILL,
                              kill_pod_options=KillPodOptions(grace_period_override=5)))
    # A newer spec arriving before the worker reacts must not undo the kill.
    workers.update_pod(update(make_pod("a", "v2")))
    assert workers.is_pod_termination_requested("a")
    await until(lambda: workers.is_pod_known_terminated("a"))
    await until(lambda: "sync_terminated_pod" in syncer.kinds("a"))
    assert syncer.kinds("a") == ["sync_pod", "sync_pod_cancelled", "sync_pod_end",
                                 "sync_terminating_pod", "sync_terminated_pod"]
    assert syncer.calls("sync_terminating_pod", "a") == [5]
    assert not workers.could_have_running_containers("a")
    assert workers.should_pod_runtime_be_removed("a")
    # Killed by the kubelet but still in config: the content stays.
    assert not workers.should_pod_content_be_removed("a")


async def test_terminal_sync_goes_terminating_then_terminated_once(workers: PodWorkers,
                                                                   syncer: FakeSyncer) -> None:
    syncer.terminal.add("job")
    workers.update_pod(update(make_pod("job", grace=7), SyncPodType.CREATE))
    await until(lambda: "sync_terminated_pod" in syncer.kinds("job"))
    workers.update_pod(update(make_pod("job")))
    workers.update_pod(update(make_pod("job"), SyncPodType.SYNC))
    await settle()
    assert [k for k in syncer.kinds("job") if k != "sync_pod_end"] == [
        "sync_pod", "sync_terminating_pod", "sync_terminated_pod"]
    assert workers.is_pod_known_terminated("job")
    assert workers.should_pod_be_finished("job")


async def test_terminating_error_is_retried_until_it_succeeds(
        workers: PodWorkers, syncer: FakeSyncer, queue_clock: FakeClock) -> None:
    syncer.terminating_errors["a"] = [RuntimeError("container still running")]
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 1)
    workers.update_pod(update(make_pod("a", deleting_grace=3)))
    await until(lambda: len(syncer.calls("sync_terminating_pod", "a")) == 1)
    await settle()
    assert not workers.is_pod_known_terminated("a")
    assert workers.could_have_running_containers("a")

    queue_clock.now += 15
    assert workers.work_queue.get_work() == ["a"]
    # The kubelet's sync loop turns due work into sync updates: still a termination.
    workers.update_pod(update(make_pod("a", deleting_grace=3), SyncPodType.SYNC))
    await until(lambda: "sync_terminated_pod" in syncer.kinds("a"))
    assert syncer.calls("sync_terminating_pod", "a") == [3, 3]
    assert syncer.calls("sync_pod", "a") == [(SyncPodType.CREATE, "v1")]
    assert workers.should_pod_content_be_removed("a")  # deleted and terminated


async def test_sync_error_is_requeued_after_backoff(workers: PodWorkers, syncer: FakeSyncer,
                                                    queue_clock: FakeClock) -> None:
    syncer.sync_errors["a"] = [RuntimeError("image pull failed")]
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    # The worker requeues right after the failed sync returns.
    await until(lambda: workers.work_queue.due_time("a") is not None)
    due = workers.work_queue.due_time("a")
    assert due is not None and 10.0 <= due - queue_clock.now <= 15.0
    assert workers.work_queue.get_work() == []
    queue_clock.now += 9.9
    assert workers.work_queue.get_work() == []
    queue_clock.now += 5.2
    assert workers.work_queue.get_work() == ["a"]

    workers.update_pod(update(make_pod("a"), SyncPodType.SYNC))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 2)
    due = workers.work_queue.due_time("a")
    assert due is not None and 60.0 <= due - queue_clock.now <= 90.0


async def test_network_not_ready_retries_quickly(workers: PodWorkers, syncer: FakeSyncer,
                                                 queue_clock: FakeClock) -> None:
    syncer.sync_errors["a"] = [RuntimeError("network is not ready: cni config uninitialized")]
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 1)
    due = workers.work_queue.due_time("a")
    assert due is not None and 1.0 <= due - queue_clock.now <= 1.5


async def test_sync_known_pods_kills_undesired_and_forgets_terminated(
        workers: PodWorkers, syncer: FakeSyncer) -> None:
    keep, drop = make_pod("keep"), make_pod("drop")
    workers.update_pod(update(keep, SyncPodType.CREATE))
    workers.update_pod(update(drop, SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end")) == 2)

    known = workers.sync_known_pods({"keep": keep})
    assert known["keep"].state == PodWorkerState.SYNC and not known["keep"].orphan
    assert known["drop"].orphan and known["drop"].state == PodWorkerState.TERMINATING
    assert known["drop"].has_config
    await until(lambda: "sync_terminated_pod" in syncer.kinds("drop"))
    assert workers.should_pod_content_be_removed("drop")  # orphans count as deleted

    known = workers.sync_known_pods({"keep": keep})
    assert set(known) == {"keep"}
    assert "sync_terminating_pod" not in syncer.kinds("keep")
    # Forgotten: after housekeeping, an unknown UID is one that runs nothing.
    assert not workers.could_have_running_containers("drop")
    assert workers.should_pod_content_be_removed("drop")
    assert not workers.is_pod_known_terminated("drop")


async def test_unknown_pods_before_and_after_first_housekeeping(workers: PodWorkers) -> None:
    assert workers.could_have_running_containers("ghost")
    assert not workers.should_pod_content_be_removed("ghost")
    workers.sync_known_pods({})
    assert not workers.could_have_running_containers("ghost")
    assert workers.should_pod_content_be_removed("ghost")
    assert not workers.is_pod_termination_requested("ghost")


async def test_kill_of_runtime_only_pod_uses_sync_terminating_runtime_pod(
        workers: PodWorkers, syncer: FakeSyncer) -> None:
    orphan = Pod(id="orphan", name="old-web", namespace="default")
    workers.update_pod(UpdatePodOptions(update_type=SyncPodType.SYNC, running_pod=orphan))
    await settle()
    assert syncer.log == []  # a pod without spec can only be killed

    workers.update_pod(UpdatePodOptions(update_type=SyncPodType.KILL, running_pod=orphan))
    await until(lambda: bool(syncer.calls("sync_terminating_runtime_pod")))
    await settle()
    assert syncer.log == [("sync_terminating_runtime_pod", "orphan", "old-web")]
    # The orphan leaves no record behind once stopped.
    workers.sync_known_pods({})
    assert not workers.could_have_running_containers("orphan")


async def test_terminated_uid_is_not_restarted_until_forgotten(workers: PodWorkers,
                                                              syncer: FakeSyncer) -> None:
    pod = make_pod("a", static=True)
    workers.update_pod(update(pod, SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 1)
    workers.update_pod(update(pod, SyncPodType.KILL))
    await until(lambda: "sync_terminated_pod" in syncer.kinds("a"))

    workers.update_pod(update(pod, SyncPodType.CREATE))
    await settle()
    assert len(syncer.calls("sync_pod", "a")) == 1

    # Housekeeping forgets the old incarnation because a CREATE asked for it...
    assert "a" not in workers.sync_known_pods({"a": pod})
    # ...and the kubelet re-sends the pod, which now starts afresh.
    workers.update_pod(update(pod, SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod", "a")) == 2)


async def test_worker_never_syncs_on_state_older_than_its_last_sync(
        relist_workers: PodWorkers, syncer: FakeSyncer, cache: PodCache) -> None:
    workers = relist_workers
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    await settle()
    assert syncer.log == []  # no relist yet: nothing is known about the runtime
    cache.update_time(time.monotonic())
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 1)

    workers.update_pod(update(make_pod("a", "v2")))
    await settle()
    assert len(syncer.calls("sync_pod", "a")) == 1  # cache predates the last sync
    cache.set("a", PodStatus(id="a", name="pod-a"), None, time.monotonic())
    await until(lambda: len(syncer.calls("sync_pod", "a")) == 2)


async def test_a_kill_asks_for_fresh_state_instead_of_waiting_a_relist_period(
        relist_workers: PodWorkers, syncer: FakeSyncer, cache: PodCache,
        requested_relists: list[float]) -> None:
    workers, refreshes = relist_workers, requested_relists
    cache.update_time(time.monotonic())
    for uid in ("b", "a"):  # a last: no look asked for by b's start is newer than a's sync
        await start_and_sync_again(workers, syncer, uid)
    asked_by_starts = len(refreshes)

    workers.update_pod(update(make_pod("a", "v2")))
    await settle()
    # An update still waits for the PLEG's next relist.
    assert len(refreshes) == asked_by_starts and len(syncer.calls("sync_pod", "a")) == 2
    workers.update_pod(update(make_pod("b"), SyncPodType.KILL))
    await until(lambda: len(syncer.calls("sync_terminating_pod", "b")) == 1)
    assert len(refreshes) > asked_by_starts


async def test_a_kill_does_not_wait_behind_a_sync_waiting_for_the_next_relist(
        relist_workers: PodWorkers, syncer: FakeSyncer, cache: PodCache,
        requested_relists: list[float]) -> None:
    workers, refreshes = relist_workers, requested_relists
    cache.update_time(time.monotonic())
    await start_and_sync_again(workers, syncer, "a")
    asked_by_start = len(refreshes)
    # A PLEG event's sync: it waits for a relist newer than the last sync (none comes).
    workers.update_pod(update(make_pod("a")))
    await settle()
    assert len(syncer.calls("sync_pod", "a")) == 2 and len(refreshes) == asked_by_start

    workers.update_pod(update(make_pod("a"), SyncPodType.KILL))
    await until(lambda: len(syncer.calls("sync_terminating_pod", "a")) == 1)
    # The waiting sync never ran: the kill went first, on freshly asked-for state.
    assert len(syncer.calls("sync_pod", "a")) == 2 and len(refreshes) > asked_by_start


async def test_a_new_pods_first_sync_asks_for_a_fresh_look_that_its_next_sync_can_use(
        relist_workers: PodWorkers, syncer: FakeSyncer, cache: PodCache,
        requested_relists: list[float]) -> None:
    workers, refreshes = relist_workers, requested_relists
    cache.update_time(time.monotonic())
    syncs_ended_when_asked: list[int] = []
    cache.set_refresher(lambda: (syncs_ended_when_asked.append(
        len(syncer.calls("sync_pod_end", "a"))), cache.update_time(time.monotonic())))

    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 1)
    await settle()
    # Asked once, after the sync that started the pod ended.
    assert syncs_ended_when_asked == [1]
    # The PLEG event for the containers it started: that look is newer than the sync.
    workers.update_pod(update(make_pod("a")))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 2)
    # Later syncs wait for the PLEG's own relists, as upstream's do.
    workers.update_pod(update(make_pod("a")))
    await settle()
    assert len(syncer.calls("sync_pod", "a")) == 2 and syncs_ended_when_asked == [1]
    assert refreshes == []


async def test_deletion_grace_period_only_shrinks(workers: PodWorkers,
                                                  syncer: FakeSyncer) -> None:
    syncer.terminating_errors["a"] = [RuntimeError("still stopping")] * 2
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 1)
    workers.update_pod(update(make_pod("a", deleting_grace=20)))
    await until(lambda: len(syncer.calls("sync_terminating_pod", "a")) == 1)
    workers.update_pod(update(make_pod("a"), SyncPodType.KILL,
                              kill_pod_options=KillPodOptions(grace_period_override=60)))
    await until(lambda: len(syncer.calls("sync_terminating_pod", "a")) == 2)
    workers.update_pod(update(make_pod("a"), SyncPodType.KILL,
                              kill_pod_options=KillPodOptions(grace_period_override=2)))
    await until(lambda: "sync_terminated_pod" in syncer.kinds("a"))
    assert syncer.calls("sync_terminating_pod", "a") == [20, 20, 2]


async def test_eviction_completes_the_waiter_and_allows_content_removal(
        workers: PodWorkers, syncer: FakeSyncer) -> None:
    workers.update_pod(update(make_pod("a"), SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", "a")) == 1)

    def mark_evicted(status: V1PodStatus) -> None:
        status.reason = "Evicted"

    await asyncio.wait_for(workers.terminate_pod_abnormally_and_wait(
        make_pod("a"), grace_period_override=0, pod_status_func=mark_evicted, evict=True), 2)
    assert workers.is_pod_known_terminated("a")
    assert workers.should_pod_content_be_removed("a")
    assert syncer.calls("sync_terminating_pod", "a") == [1]  # never below one second
    options = workers.abnormal_termination("a")
    assert options is not None and options.pod_status_func is mark_evicted


async def test_static_pod_with_same_name_waits_for_the_old_one(
        workers: PodWorkers, syncer: FakeSyncer) -> None:
    old = make_pod("old", name="etcd", static=True)
    new = make_pod("new", name="etcd", static=True)
    syncer.terminating_errors["old"] = [RuntimeError("still stopping")]
    workers.update_pod(update(old, SyncPodType.CREATE))
    await until(lambda: len(syncer.calls("sync_pod_end", "old")) == 1)

    workers.update_pod(update(old, SyncPodType.KILL))
    workers.update_pod(update(new, SyncPodType.CREATE))
    await until(lambda: bool(syncer.calls("sync_terminating_pod", "old")))
    assert workers.is_pod_for_mirror_pod_terminating_by_full_name("etcd_default")
    workers.update_pod(update(new, SyncPodType.SYNC))
    await settle()
    assert syncer.calls("sync_pod", "new") == []

    workers.update_pod(update(old, SyncPodType.SYNC))  # retry of the failed termination
    await until(lambda: "sync_terminated_pod" in syncer.kinds("old"))
    workers.update_pod(update(new, SyncPodType.SYNC))
    await until(lambda: len(syncer.calls("sync_pod", "new")) == 1)


async def test_a_crashed_worker_does_not_leave_its_pod_stuck(
        workers: PodWorkers, syncer: FakeSyncer, queue_clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A bug in the worker's own bookkeeping (not a failed sync) kills its task.
    real_complete_work = workers._complete_work
    crashes = [RuntimeError("bookkeeping bug")]

    def complete_work_once_broken(*args: Any, **kwargs: Any) -> None:
        if crashes:
            raise crashes.pop()
        real_complete_work(*args, **kwargs)

    monkeypatch.setattr(workers, "_complete_work", complete_work_once_broken)
    workers.update_pod(update(make_pod("a", "v1"), SyncPodType.CREATE))
    await until(lambda: not crashes and not workers._tasks)
    assert "Pod worker crashed" in caplog.text and "bookkeeping bug" in caplog.text
    assert "Traceback" in caplog.text

    # The sync loop retries the pod after the back-off, and later updates are processed.
    assert workers.work_queue.get_work() == []
    queue_clock.now += 60
    assert workers.work_queue.get_work() == ["a"]
    workers.update_pod(update(make_pod("a", "v2")))
    await until(lambda: len(syncer.calls("sync_pod_end")) == 2)
    assert syncer.calls("sync_pod")[-1] == (SyncPodType.UPDATE, "v2")
