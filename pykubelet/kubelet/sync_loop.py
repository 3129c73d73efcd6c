"""The sync loop: where every reason to act on a pod comes together.

Upstream's ``syncLoop`` is a ``for`` around ``syncLoopIteration``, a Go
``select`` over five channels. Here it is the same shape over asyncio:

- config updates (ADD/UPDATE/REMOVE/RECONCILE/DELETE from the pod sources),
- PLEG events (the runtime changed under a pod),
- the sync ticker (1 s: pods whose resync or retry time has come, and pods an
  internal module wants synced now, such as one past its active deadline:
  ``get_pods_to_sync``),
- the housekeeping ticker (2 s: clean up what no source wants any more;
  then the pods it has let go may lose their dead containers and sandboxes),
- probe results (the liveness, readiness and startup result managers).

Each iteration handles exactly one ready case and returns, so the loop can
check the runtime's health and record that it is alive (``/healthz/syncloop``)
between events. While the runtime reports errors the loop backs off
exponentially (100 ms doubling to 5 s) instead of syncing pods; during
start-up, before the first runtime status and relist, that is logged at info.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_ref, pod_uid
from pykubelet.api.kubetypes import PodOperation, PodUpdate
from pykubelet.container import PodLifecycleEvent, PodLifecycleEventType, ProbeResult
from pykubelet.lifecycle.interfaces import PodSyncLoopHandler
from pykubelet.prober.results import ResultUpdate
from pykubelet.util import klog

SYNC_PERIOD = 1.0
HOUSEKEEPING_PERIOD = 2.0
HOUSEKEEPING_WARNING = 15.0
BACKOFF_BASE, BACKOFF_MAX, BACKOFF_FACTOR = 0.1, 5.0, 2.0


class SyncHandler(Protocol):
    """What the loop dispatches to (upstream ``SyncHandler``), implemented by ``Kubelet``."""

    async def handle_pod_additions(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_updates(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_removes(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_reconcile(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_syncs(self, pods: list[V1Pod]) -> None: ...
    async def handle_pod_cleanups(self) -> None: ...


@dataclass
class LoopInputs:
    """The channels and state the loop reads, wired by the composition root."""

    config_updates: asyncio.Queue[PodUpdate]
    pleg_events: asyncio.Queue[PodLifecycleEvent]
    liveness_updates: asyncio.Queue[ResultUpdate]
    readiness_updates: asyncio.Queue[ResultUpdate]
    startup_updates: asyncio.Queue[ResultUpdate]
    runtime_errors: Callable[[], list[str]]
    pod_by_uid: Callable[[str], V1Pod | None]
    pods_to_sync: Callable[[], list[V1Pod]]
    sources_ready: Callable[[], bool]
    on_probe_update: Callable[[str, ResultUpdate], None]
    on_container_died: Callable[[str, str], None] = lambda uid, container_id: None
    # After each housekeeping: pods whose workers it has just forgotten may now lose
    # what their dead containers and sandboxes left (``ContainerGC.queue_removable_pods``).
    on_housekeeping_done: Callable[[], None] = lambda: None
    heartbeat: Callable[[], None] = lambda: None
    # True while the runtime errors are only first checks still under way (start-up).
    runtime_starting: Callable[[], bool] = lambda: False
    sync_period: float = SYNC_PERIOD
    housekeeping_period: float = HOUSEKEEPING_PERIOD
    # Test seams: the tickers' and the back-off's clock; production keeps the defaults.
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


class Ticker:
    """A drift-free periodic tick; missed ticks are dropped, as Go's ``time.Ticker`` does.

    ``clock`` and ``sleep`` are a test seam (a fake clock); production keeps the defaults.
    """

    def __init__(self, period: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.period = period
        self._clock = clock
        self._sleep = sleep
        self._next = clock() + period

    async def tick(self) -> None:
        delay = self._next - self._clock()
        if delay > 0:
            await self._sleep(delay)
        now = self._clock()
        self._next += self.period
        if self._next <= now:
            self._next = now + self.period


@dataclass
class _Select:
    """Go's ``select`` for asyncio: one pending receive per case, kept across iterations.

    A receive that lost the race is not cancelled (that could drop a queue
    item); it stays pending and wins a later iteration.
    """

    cases: dict[str, Callable[[], Awaitable[Any]]]
    _pending: dict[str, asyncio.Future[Any]] = field(default_factory=dict)

    async def next(self) -> tuple[str, Any]:
        for name, receive in self.cases.items():
            if name not in self._pending:
                self._pending[name] = asyncio.ensure_future(receive())
        done, _ = await asyncio.wait(self._pending.values(), return_when=asyncio.FIRST_COMPLETED)
        # Prefer the case order when several are ready, so config changes are
        # not starved by a busy PLEG; Go picks at random, either is correct.
        for name, future in list(self._pending.items()):
            if future in done:
                del self._pending[name]
                return name, future.result()
        raise RuntimeError("select woke with nothing ready")

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()


def get_pods_to_sync(*, pods: Iterable[V1Pod], due_uids: Iterable[str],
                     sync_loop_handlers: Sequence[PodSyncLoopHandler]) -> list[V1Pod]:
    """Upstream ``getPodsToSync``: what the sync tick hands to the pod workers.

    Of ``pods`` (the pods the kubelet runs), those whose UID is due in the work
    queue (``due_uids``: a resync or a retry), and those any handler wants synced
    now although nothing is due for them (a pod past its active deadline).
    """
    due = set(due_uids)
    return [pod for pod in pods
            if pod_uid(pod) in due or any(h.should_sync(pod) for h in sync_loop_handlers)]


def is_sync_pod_worthy(event: PodLifecycleEvent) -> bool:
    """Removal of a container alone does not change what the pod needs."""
    return event.type != PodLifecycleEventType.CONTAINER_REMOVED


async def sync_loop(inputs: LoopInputs, handler: SyncHandler) -> None:
    """Run iterations until the config channel is closed or the task is cancelled."""
    klog.info("Starting kubelet main sync loop")
    sync_ticker = Ticker(inputs.sync_period, clock=inputs.clock, sleep=inputs.sleep)
    housekeeping_ticker = Ticker(inputs.housekeeping_period, clock=inputs.clock,
                                 sleep=inputs.sleep)
    select = _Select({
        "config": inputs.config_updates.get,
        "pleg": inputs.pleg_events.get,
        "sync": sync_ticker.tick,
        "housekeeping": housekeeping_ticker.tick,
        "liveness": inputs.liveness_updates.get,
        "readiness": inputs.readiness_updates.get,
        "startup": inputs.startup_updates.get,
    })
    backoff = BACKOFF_BASE
    try:
        while True:
            errors = inputs.runtime_errors()
            if errors:
                if inputs.runtime_starting():
                    # The first runtime status and relist are on their way: expected.
                    klog.info("Skipping pod synchronization", err="; ".join(errors))
                else:
                    klog.error("Skipping pod synchronization", "; ".join(errors))
                await inputs.sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * BACKOFF_FACTOR)
                continue
            backoff = BACKOFF_BASE
            inputs.heartbeat()
            if not await sync_loop_iteration(select, inputs, handler):
                break
            inputs.heartbeat()
    finally:
        select.close()


async def sync_loop_iteration(select: _Select, inputs: LoopInputs, handler: SyncHandler) -> bool:
    """Handle one ready case; False ends the loop."""
    case, value = await select.next()
    if case == "config":
        update: PodUpdate = value
        await _dispatch_config_update(update, handler)
    elif case == "pleg":
        event: PodLifecycleEvent = value
        if is_sync_pod_worthy(event):
            pod = inputs.pod_by_uid(event.pod_uid)
            if pod is not None:
                klog.v(2).info("SyncLoop (PLEG): event for pod", pod=pod_ref(pod),
                               event=event.type.value, data=event.data)
                handler.handle_pod_syncs([pod])
            else:
                klog.v(4).info("SyncLoop (PLEG): pod does not exist, ignore irrelevant event",
                               podUID=event.pod_uid, event=event.type.value)
        if event.type == PodLifecycleEventType.CONTAINER_DIED:
            inputs.on_container_died(event.pod_uid, event.data)
    elif case == "sync":
        pods = inputs.pods_to_sync()
        if pods:
            klog.v(4).info("SyncLoop (SYNC) pods", total=len(pods),
                           pods=",".join(pod_ref(p) for p in pods))
            handler.handle_pod_syncs(pods)
    elif case in ("liveness", "readiness", "startup"):
        probe: ResultUpdate = value
        # A liveness success changes nothing; every other change needs a sync:
        # a failed liveness kills the container, readiness and startup change status.
        if case != "liveness" or probe.result == ProbeResult.FAILURE:
            inputs.on_probe_update(case, probe)
            pod = inputs.pod_by_uid(probe.pod_uid)
            if pod is not None:
                klog.v(1).info("SyncLoop (probe)", probe=case, result=probe.result.value,
                               pod=pod_ref(pod), containerID=str(probe.container_id))
                handler.handle_pod_syncs([pod])
    elif case == "housekeeping":
        if not inputs.sources_ready():
            klog.v(4).info("SyncLoop (housekeeping, skipped): sources aren't ready yet")
        else:
            started = inputs.clock()
            try:
                await handler.handle_pod_cleanups()
            except Exception as err:  # housekeeping must never stop the loop
                klog.error("Failed cleaning pods", err)
            inputs.on_housekeeping_done()
            took = inputs.clock() - started
            if took > HOUSEKEEPING_WARNING:
                klog.error("Housekeeping took longer than expected", seconds=round(took, 3))
    return True


async def _dispatch_config_update(update: PodUpdate, handler: SyncHandler) -> None:
    names = ",".join(pod_ref(p) for p in update.pods)
    op = update.op
    if op == PodOperation.ADD:
        klog.v(2).info("SyncLoop ADD", source=update.source, pods=names)
        await handler.handle_pod_additions(update.pods)
    elif op == PodOperation.UPDATE:
        klog.v(2).info("SyncLoop UPDATE", source=update.source, pods=names)
        handler.handle_pod_updates(update.pods)
    elif op == PodOperation.REMOVE:
        klog.v(2).info("SyncLoop REMOVE", source=update.source, pods=names)
        handler.handle_pod_removes(update.pods)
    elif op == PodOperation.RECONCILE:
        klog.v(4).info("SyncLoop RECONCILE", source=update.source, pods=names)
        handler.handle_pod_reconcile(update.pods)
    elif op == PodOperation.DELETE:
        # A graceful deletion is an update that carries a deletion timestamp.
        klog.v(2).info("SyncLoop DELETE", source=update.source, pods=names)
        handler.handle_pod_updates(update.pods)
    else:
        klog.error("Kubelet does not support this pod update operation", op=str(op))

