"""The probe manager: workers per pod, their lifecycle, and ready/started in the pod status."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kubernetes_asyncio.client import V1Container, V1PodStatus, V1Probe

from pykubelet.container import ProbeResult
from pykubelet.prober.manager import ProbeManager
from pykubelet.prober.metrics import PROBER_REGISTRY
from pykubelet.prober.results import ResultsManager, ResultUpdate
from pykubelet.prober.worker import ProbeType
from tests.unit.test_prober_worker import (
    NOW,
    FakeClock,
    ScriptedProber,
    StatusBoard,
    cid,
    exec_probe,
    exited,
    make_pod,
    running,
    waiting,
)
from tests.unit.waiting import until


class ManagerRig:
    def __init__(self, prober: ScriptedProber | None = None, *, fake_clock: bool = True,
                 jitter: float = 0.0) -> None:
        self.clock = FakeClock()
        self.board = StatusBoard()
        self.prober = prober or ScriptedProber(clock=self.clock)
        self.liveness = ResultsManager()
        self.readiness = ResultsManager()
        self.startup = ResultsManager()
        self.real_sleeps: list[float] = []  # the waits begun on the wall clock (not fake_clock)
        clock: Callable[[], float] = self.clock if fake_clock else time.time
        self.manager = ProbeManager(
            self.prober, liveness=self.liveness, readiness=self.readiness,
            startup=self.startup, status_provider=self.board.get, clock=clock,
            sleep=self.clock.sleep if fake_clock else self._real_sleep, jitter=lambda: jitter)

    async def _real_sleep(self, seconds: float) -> None:
        self.real_sleeps.append(seconds)
        await asyncio.sleep(seconds)


def sidecar(*, liveness: V1Probe | None = None, startup: V1Probe | None = None) -> V1Container:
    return V1Container(name="proxy", image="busybox", restart_policy="Always",
                       liveness_probe=liveness, startup_probe=startup)


# -- worker lifecycle ------------------------------------------------------------------


async def test_add_pod_starts_one_worker_per_probe_of_app_containers_and_sidecars() -> None:
    rig = ManagerRig(fake_clock=False)  # no status: the workers idle
    plain_init = V1Container(name="setup", image="busybox", startup_probe=exec_probe())
    pod = make_pod(liveness=exec_probe(), readiness=exec_probe(),
                   init_containers=[plain_init, sidecar(startup=exec_probe())])

    rig.manager.add_pod(pod)
    rig.manager.add_pod(pod)  # a pod update: no duplicates

    assert rig.manager.worker_count() == 3
    assert rig.manager.has_worker("uid-1", "app", ProbeType.LIVENESS)
    assert rig.manager.has_worker("uid-1", "app", ProbeType.READINESS)
    assert rig.manager.has_worker("uid-1", "proxy", ProbeType.STARTUP)
    await rig.manager.stop()
    assert rig.manager.worker_count() == 0


async def test_remove_pod_stops_workers_and_forgets_their_verdicts() -> None:
    rig = ManagerRig()
    pod = make_pod(readiness=exec_probe())
    rig.board.put("uid-1", running("a"))
    rig.manager.add_pod(pod)
    await until(lambda: rig.readiness.get(cid("a")) is ProbeResult.SUCCESS)

    rig.manager.remove_pod(pod)
    await until(lambda: rig.manager.worker_count() == 0)
    assert rig.readiness.get(cid("a")) is None


async def test_clean_up_pods_keeps_only_desired_pods() -> None:
    rig = ManagerRig(fake_clock=False)
    kept, gone = make_pod("uid-kept", liveness=exec_probe()), make_pod("uid-gone",
                                                                       liveness=exec_probe())
    rig.manager.add_pod(kept)
    rig.manager.add_pod(gone)

    rig.manager.clean_up_pods({"uid-kept"})
    await until(lambda: rig.manager.worker_count() == 1)
    assert rig.manager.has_worker("uid-kept", "app", ProbeType.LIVENESS)
    await rig.manager.stop()


async def test_terminating_pod_stops_liveness_and_startup_and_is_not_ready() -> None:
    rig = ManagerRig(fake_clock=False)
    pod = make_pod(liveness=exec_probe(), readiness=exec_probe(), startup=exec_probe())
    rig.manager.add_pod(pod)
    rig.readiness.set(cid("a"), ProbeResult.SUCCESS, pod)
    rig.startup.set(cid("a"), ProbeResult.SUCCESS, pod)

    rig.manager.stop_liveness_and_startup(pod)
    await until(lambda: rig.manager.worker_count() == 1)
    assert rig.manager.has_worker("uid-1", "app", ProbeType.READINESS)

    status = V1PodStatus(container_statuses=[running("a")])
    rig.manager.update_pod_status(pod, status)
    assert status.container_statuses[0].started is True
    assert status.container_statuses[0].ready is False
    await rig.manager.stop()


# -- probing through the manager ---------------------------------------------------------


async def test_liveness_failure_is_published_after_threshold_and_probing_pauses() -> None:
    rig = ManagerRig()
    rig.prober.default = ProbeResult.FAILURE
    pod = make_pod(liveness=exec_probe(period=5, failure=3))
    rig.board.put("uid-1", running("a"))
    rig.manager.add_pod(pod)

    updates = rig.liveness.updates()
    assert await asyncio.wait_for(updates.get(), 2) == ResultUpdate(
        cid("a"), ProbeResult.SUCCESS, "uid-1")
    assert await asyncio.wait_for(updates.get(), 2) == ResultUpdate(
        cid("a"), ProbeResult.FAILURE, "uid-1")
    for _ in range(50):
        await asyncio.sleep(0)

    assert [call[2] for call in rig.prober.calls] == [NOW, NOW + 5, NOW + 10]
    await rig.manager.stop()


async def test_first_probe_is_spread_over_a_period_only_right_after_start() -> None:
    rig = ManagerRig(jitter=0.5)
    rig.board.put("uid-1", running("a"))
    rig.board.put("uid-2", running("b"))

    first = make_pod("uid-1", readiness=exec_probe(period=10))
    rig.manager.add_pod(first)
    await until(lambda: len(rig.prober.calls) >= 1)
    assert rig.prober.calls[0][2] == NOW + 5
    rig.manager.remove_pod(first)  # its worker would keep moving the fake clock
    await until(lambda: rig.manager.worker_count() == 0)

    # Long after start, a new pod's probes begin at once.
    started = rig.clock.now = NOW + 3600
    rig.manager.add_pod(make_pod("uid-2", readiness=exec_probe(period=10)))
    await until(lambda: any(call[1] == cid("b") for call in rig.prober.calls))
    assert next(call[2] for call in rig.prober.calls if call[1] == cid("b")) == started
    await rig.manager.stop()


async def test_metrics_are_labelled_per_container_and_dropped_with_the_pod() -> None:
    rig = ManagerRig()
    pod = make_pod("uid-mm", name="mm", init_containers=[sidecar(liveness=exec_probe())])
    rig.board.put("uid-mm", running("s", name="proxy"))
    rig.manager.add_pod(pod)
    labels = {"probe_type": "Liveness", "result": "successful", "container": "proxy",
              "pod": "mm", "namespace": "default", "pod_uid": "uid-mm"}
    await until(lambda: (PROBER_REGISTRY.get_sample_value("prober_probe_total", labels)
                         or 0) >= 3)

    rig.manager.remove_pod(pod)
    await until(lambda: rig.manager.worker_count() == 0)
    assert PROBER_REGISTRY.get_sample_value("prober_probe_total", labels) is None


async def test_becoming_started_triggers_the_readiness_probe_at_once() -> None:
    rig = ManagerRig(ScriptedProber(), fake_clock=False)
    pod = make_pod(readiness=exec_probe(period=3600))
    long_ago = time.time() - 100
    rig.board.put("uid-1", running("a", started_at=long_ago, started=False))
    rig.manager.add_pod(pod)
    # The worker saw a container not started yet: it waits a period.
    await until(lambda: len(rig.real_sleeps) == 1)
    assert rig.prober.calls == []

    status = rig.board.put("uid-1", running("a", started_at=long_ago, started=True))
    rig.manager.update_pod_status(pod, status)
    assert status.container_statuses[0].ready is False  # not probed yet

    await until(lambda: rig.readiness.get(cid("a")) is ProbeResult.SUCCESS)
    rig.manager.update_pod_status(pod, status)
    assert status.container_statuses[0].ready is True
    await rig.manager.stop()


# -- update_pod_status -----------------------------------------------------------------


async def test_containers_without_probes_are_started_and_ready_while_running() -> None:
    rig = ManagerRig(fake_clock=False)
    pod = make_pod()
    status = V1PodStatus(container_statuses=[running("a")])
    rig.manager.update_pod_status(pod, status)
    assert (status.container_statuses[0].started, status.container_statuses[0].ready) == (
        True, True)

    for not_running in (waiting(), exited("a")):
        status = V1PodStatus(container_statuses=[not_running])
        rig.manager.update_pod_status(pod, status)
        assert (status.container_statuses[0].started,
                status.container_statuses[0].ready) == (False, False)


async def test_startup_probe_gates_started_and_ready() -> None:
    rig = ManagerRig(fake_clock=False)
    pod = make_pod(readiness=exec_probe(), startup=exec_probe())
    rig.manager.add_pod(pod)
    rig.readiness.set(cid("a"), ProbeResult.SUCCESS, pod)

    def observe() -> tuple[bool, bool]:
        status = V1PodStatus(container_statuses=[running("a", started=False)])
        rig.manager.update_pod_status(pod, status)
        return status.container_statuses[0].started, status.container_statuses[0].ready

    assert observe() == (False, False)  # startup probe not run yet
    rig.startup.set(cid("a"), ProbeResult.UNKNOWN, pod)
    assert observe() == (False, False)
    rig.startup.set(cid("a"), ProbeResult.SUCCESS, pod)
    assert observe() == (True, True)
    rig.readiness.set(cid("a"), ProbeResult.FAILURE, pod)
    assert observe() == (True, False)
    await rig.manager.stop()


async def test_init_containers_ready_when_completed_and_sidecars_like_app_containers() -> None:
    rig = ManagerRig(fake_clock=False)
    plain = V1Container(name="setup", image="busybox")
    pod = make_pod(init_containers=[plain, sidecar()])
    for exit_code, ready in ((0, True), (1, False)):
        status = V1PodStatus(init_container_statuses=[exited("i", exit_code, name="setup"),
                                                      running("s", name="proxy")])
        rig.manager.update_pod_status(pod, status)
        setup, proxy = status.init_container_statuses
        assert setup.ready is ready
        assert (proxy.started, proxy.ready) == (True, True)


async def test_deleted_pod_reports_no_ready_container() -> None:
    rig = ManagerRig(fake_clock=False)
    pod = make_pod(deleting=True)
    status = V1PodStatus(container_statuses=[running("a")])
    rig.manager.update_pod_status(pod, status)
    assert status.container_statuses[0].ready is False
