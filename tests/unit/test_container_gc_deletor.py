"""What a dead pod leaves in the runtime goes as its death events arrive, not at the GC pass.

The sync loop, the PLEG, the pod cache and the container GC's deletor run for
real over one fake runtime (the CRI objects the runtime manager lists, and
the removals it makes); the pod workers' answer to "may this pod's content
go?" is a flag the test sets. Nothing here runs a container GC pass: the
fake cannot answer one (no ``list_kubelet_sandboxes``), so a leftover would
show, and clocks move only when a test advances them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Pod

from pykubelet.api.kubetypes import PodUpdate
from pykubelet.container import (
    Container,
    ContainerID,
    ContainerState,
    ContainerStatus,
    Pod,
    PodLifecycleEvent,
    PodStatus,
    RuntimeStatus,
)
from pykubelet.container.cache import PodCache
from pykubelet.kubelet.sync_loop import LoopInputs, sync_loop
from pykubelet.kuberuntime.gc import DELETOR_BUFFER, ContainerGC
from pykubelet.kuberuntime.labels import POD_UID_LABEL
from pykubelet.kuberuntime.sandbox import sandbox_to_kube_container
from pykubelet.pleg import GenericPLEG
from pykubelet.prober.results import ResultUpdate
from tests.unit.waiting import ManualClock, settle, until

UID = "pod-1"
RUNTIME = "containerd"


@dataclass
class FakeContainer:
    id: str
    name: str
    sandbox: str
    state: ContainerState
    created: float
    attempt: int = 0


@dataclass
class FakeSandbox:
    id: str
    ready: bool
    created: float


@dataclass
class FakeRuntime:
    """The runtime manager as the PLEG and the deletor use it, over in-memory CRI state."""

    runtime_type: str = RUNTIME
    sandboxes: dict[str, FakeSandbox] = field(default_factory=dict)
    containers: dict[str, FakeContainer] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.runtime_service = self  # list_containers, as the CRI answers it
        self.containers_api = _Containers(self)

    # -- kubecontainer.Runtime (the PLEG) --------------------------------------------

    async def version(self) -> str:
        return "0"

    async def status(self) -> RuntimeStatus:
        return RuntimeStatus()

    async def get_pods(self, all_pods: bool) -> list[Pod]:
        if not self.sandboxes and not self.containers:
            return []
        return [Pod(
            id=UID, name="web", namespace="default",
            sandboxes=[sandbox_to_kube_container(self._cri_sandbox(s), RUNTIME)
                       for s in self.sandboxes.values()],
            containers=[Container(ContainerID(RUNTIME, c.id), c.name, state=c.state,
                                  created_at=c.created)
                        for c in self.containers.values()])]

    async def get_pod_status(self, uid: str, name: str, namespace: str) -> PodStatus:
        return PodStatus(
            id=uid, name=name, namespace=namespace,
            sandbox_statuses=[api_pb2.PodSandboxStatus(
                id=s.id, created_at=int(s.created * 1e9),
                state=api_pb2.SANDBOX_READY if s.ready else api_pb2.SANDBOX_NOTREADY)
                for s in sorted(self.sandboxes.values(), key=lambda s: -s.created)],
            container_statuses=[ContainerStatus(
                ContainerID(RUNTIME, c.id), c.name, c.state, created_at=c.created,
                restart_count=c.attempt) for c in self.containers.values()])

    async def sync_pod(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing here syncs pods")

    async def kill_pod(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing here kills pods")

    # -- what the deletor calls -----------------------------------------------------

    async def list_containers(self, filter: api_pb2.ContainerFilter | None = None
                              ) -> list[api_pb2.Container]:
        wanted = dict(filter.label_selector) if filter is not None else {}
        listed = [api_pb2.Container(id=c.id, pod_sandbox_id=c.sandbox,
                                    labels={POD_UID_LABEL: UID})
                  for c in self.containers.values()]
        return [c for c in listed if all(c.labels.get(k) == v for k, v in wanted.items())]

    async def remove_sandbox(self, sandbox_id: str) -> None:
        held = [c.id for c in self.containers.values() if c.sandbox == sandbox_id]
        assert not held, f"sandbox {sandbox_id} removed while it holds {held}"
        if self.sandboxes.pop(sandbox_id, None) is not None:  # a second try is NotFound
            self.removed.append(sandbox_id)

    async def remove_container(self, container_id: str) -> None:
        assert self.containers[container_id].state == ContainerState.EXITED
        del self.containers[container_id]
        self.removed.append(container_id)

    # -- what the test does to it ---------------------------------------------------

    def kill(self) -> None:
        """What the pod worker's kill leaves: every container exited, the sandbox stopped."""
        for container in self.containers.values():
            container.state = ContainerState.EXITED
        for sandbox in self.sandboxes.values():
            sandbox.ready = False

    def leftovers(self) -> list[str]:
        return sorted([*self.sandboxes, *self.containers])

    @staticmethod
    def _cri_sandbox(sandbox: FakeSandbox) -> api_pb2.PodSandbox:
        return api_pb2.PodSandbox(
            id=sandbox.id, created_at=int(sandbox.created * 1e9),
            metadata=api_pb2.PodSandboxMetadata(name="web", namespace="default", uid=UID),
            state=api_pb2.SANDBOX_READY if sandbox.ready else api_pb2.SANDBOX_NOTREADY)


class _Containers:
    """``KubeGenericRuntimeManager.containers``: only ``remove`` is used here."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self._runtime = runtime

    async def remove(self, container_id: str) -> None:
        await self._runtime.remove_container(container_id)


class _Manager:
    """The runtime manager's surface the deletor touches, bound to the fake runtime."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self.runtime_service = runtime
        self.containers = runtime.containers_api
        self.remove_sandbox = runtime.remove_sandbox


class PodStates:
    """The pod workers' verdict on the one pod, as the test moves it along."""

    def __init__(self) -> None:
        self.content_removable = False

    def should_pod_content_be_removed(self, uid: str) -> bool:
        return self.content_removable

    def should_pod_runtime_be_removed(self, uid: str) -> bool:
        return self.content_removable


class NoOpHandler:
    async def handle_pod_additions(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_updates(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_removes(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_reconcile(self, pods: list[V1Pod]) -> None: ...
    def handle_pod_syncs(self, pods: list[V1Pod]) -> None: ...
    async def handle_pod_cleanups(self) -> None: ...


class Node:
    """Sync loop + PLEG + pod cache + deletor over one fake runtime, on a manual clock."""

    def __init__(self, runtime: FakeRuntime, *, housekeeping_trigger: bool = True) -> None:
        self.runtime = runtime
        self.states = PodStates()
        self.clock = ManualClock()
        self.cache = PodCache()
        self.pleg = GenericPLEG(runtime, self.cache, clock=self.clock)
        self.gc = ContainerGC(_Manager(runtime), self.states)  # type: ignore[arg-type]
        loop_fields: dict[str, Any] = {
            "config_updates": asyncio.Queue[PodUpdate](),
            "pleg_events": self.pleg.watch(),
            "liveness_updates": asyncio.Queue[ResultUpdate](),
            "readiness_updates": asyncio.Queue[ResultUpdate](),
            "startup_updates": asyncio.Queue[ResultUpdate](),
            "runtime_errors": list, "pod_by_uid": lambda uid: None, "pods_to_sync": list,
            "sources_ready": lambda: True, "on_probe_update": lambda kind, update: None,
            # As Kubelet.sync_loop_inputs wires them.
            "on_container_died": self.gc.container_died,
            "clock": self.clock, "sleep": self.clock.sleep,
        }
        if housekeeping_trigger:
            loop_fields["on_housekeeping_done"] = self.gc.queue_removable_pods
        self.inputs = LoopInputs(**loop_fields)

    def status_of(self, uid: str) -> PodStatus | None:
        status, _ = self.cache.get(uid)
        return status

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(sync_loop(self.inputs, NoOpHandler())),
                 asyncio.create_task(self.gc.run_deletor(self.status_of))]
        await settle()
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def relist(self) -> None:
        """One PLEG relist, then the loop and the deletor handle what it reported."""
        await self.pleg.relist()
        events: asyncio.Queue[PodLifecycleEvent] = self.pleg.watch()
        await until(events.empty, what="the sync loop took every PLEG event")
        await settle()

    def nothing_left(self) -> dict[str, object]:
        return {"runtime": self.runtime.leftovers(), "pod cache": self.cache.tracked_pods(),
                "pleg": self.pleg.tracked_pods()}


NOTHING = {"runtime": [], "pod cache": 0, "pleg": 0}


def running_pod() -> FakeRuntime:
    """A pod whose app container restarted once, with a sidecar, all in one ready sandbox."""
    runtime = FakeRuntime()
    runtime.sandboxes["sb1"] = FakeSandbox("sb1", ready=True, created=100.0)
    runtime.containers["app-0"] = FakeContainer("app-0", "app", "sb1", ContainerState.EXITED,
                                                created=101.0, attempt=0)
    runtime.containers["app-1"] = FakeContainer("app-1", "app", "sb1", ContainerState.RUNNING,
                                                created=102.0, attempt=1)
    runtime.containers["side-0"] = FakeContainer("side-0", "side", "sb1",
                                                 ContainerState.RUNNING, created=101.0)
    return runtime


async def test_a_deleted_pod_leaves_nothing_once_its_worker_finishes_after_the_deaths() -> None:
    """The deaths are seen while the pod still terminates (its content must stay); the
    worker then finishes and the next housekeeping lets the rest go, with no GC pass."""
    node = Node(running_pod())
    async with node.running():
        await node.relist()
        node.runtime.kill()
        await node.relist()  # ContainerDied for app-1, side-0 and sb1; content must stay
        assert node.runtime.leftovers() == ["app-1", "sb1", "side-0"]

        node.states.content_removable = True  # the worker finished terminating
        await node.clock.advance(2.0, step=0.5)  # one housekeeping tick
        await until(lambda: not node.runtime.leftovers(),
                    what="the pod's containers and sandbox removed")
        await node.relist()  # the runtime has nothing of the pod any more
    assert node.nothing_left() == NOTHING


async def test_a_deleted_pod_leaves_nothing_when_its_deaths_come_after_its_worker() -> None:
    """Content already removable when the deaths arrive: every dead container, then the
    idle sandbox, on the events alone (the sandbox stayed a GC period before)."""
    node = Node(running_pod(), housekeeping_trigger=False)
    async with node.running():
        await node.relist()
        node.runtime.kill()
        node.states.content_removable = True
        await node.relist()
        await node.relist()  # the removals seen
    assert node.nothing_left() == NOTHING
    assert node.runtime.removed[-1] == "sb1", "the sandbox goes after its containers"


async def test_a_live_pod_keeps_its_newest_dead_instance_and_its_sandbox() -> None:
    """A restart in a live pod: older dead instances and older idle sandboxes go, the
    newest dead instance (its last state) and the pod's newest sandbox stay."""
    runtime = running_pod()
    runtime.sandboxes["sb0"] = FakeSandbox("sb0", ready=False, created=50.0)  # an old one
    node = Node(runtime)
    async with node.running():
        await node.relist()
        runtime.containers["app-1"].state = ContainerState.EXITED
        runtime.containers["app-2"] = FakeContainer("app-2", "app", "sb1",
                                                    ContainerState.RUNNING, created=103.0,
                                                    attempt=2)
        await node.relist()
        await node.clock.advance(2.0, step=0.5)  # housekeeping: the pod may not go
        await settle()
    assert runtime.leftovers() == ["app-1", "app-2", "sb1", "side-0"]
    assert sorted(runtime.removed) == ["app-0", "sb0"]


@pytest.mark.parametrize("removable", [False, True])
async def test_a_sandbox_holding_containers_is_never_removed(removable: bool) -> None:
    """The pod's dead containers could not be removed (the runtime refused): its
    sandbox stays for the next try, whatever the pod's state."""
    runtime = running_pod()
    runtime.sandboxes["sb0"] = FakeSandbox("sb0", ready=False, created=50.0)
    runtime.containers["old"] = FakeContainer("old", "app", "sb0", ContainerState.EXITED,
                                              created=60.0)
    node = Node(runtime)

    async def refuse(container_id: str) -> None:
        raise RuntimeError("container is busy")

    node.gc.manager.containers.remove = refuse  # type: ignore[method-assign]
    node.states.content_removable = removable
    runtime.kill()
    await node.gc.clean_up_pod(UID, "sb1", await runtime.get_pod_status(UID, "web", "default"))
    assert runtime.sandboxes.keys() == {"sb0", "sb1"}


async def test_a_pod_waiting_for_removal_survives_a_full_deletor_queue() -> None:
    """The deletor's queue is bounded (upstream's buffer); a pod that may go while it is
    full is asked for again at the next housekeeping, not forgotten."""
    node = Node(running_pod())
    node.runtime.kill()
    status = await node.runtime.get_pod_status(UID, "web", "default")
    await node.gc.clean_up_pod(UID, "app-1", status)  # content must stay: the pod waits
    for n in range(DELETOR_BUFFER):
        node.gc.container_died("other-pod", f"c{n}")
    node.states.content_removable = True
    node.gc.queue_removable_pods()  # the queue is full: nothing to ask for now
    node.cache.set(UID, status, None, 0.0)
    async with node.running():
        await settle()  # the deletor works through the other pod's requests
        assert node.runtime.leftovers() == ["app-1", "sb1", "side-0"]
        node.gc.queue_removable_pods()  # the next housekeeping
        await until(lambda: not node.runtime.leftovers(), what="the waiting pod removed")


async def test_a_request_for_a_pod_the_cache_forgot_is_not_asked_again() -> None:
    """A death seen just before the pod cache dropped the pod (nothing of it left in the
    runtime) is done with: later housekeepings do not queue the pod again and again."""
    node = Node(running_pod())
    looked_up: list[str] = []

    def status_of(uid: str) -> PodStatus | None:
        looked_up.append(uid)
        return None  # the cache has forgotten every pod

    node.states.content_removable = True
    deletor = asyncio.create_task(node.gc.run_deletor(status_of))
    try:
        node.gc.container_died("gone-pod", "c0")
        await until(lambda: looked_up == ["gone-pod"], what="the request handled")
        for _ in range(3):  # three housekeepings
            node.gc.queue_removable_pods()
            await settle()
        assert looked_up == ["gone-pod"]
    finally:
        deletor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await deletor
