"""One probe worker against a fake prober, a fake status cache and a fake clock.

Most tests drive ``do_probe`` step by step, as upstream's worker tests do;
the cadence tests run the worker task on a fake clock whose ``sleep`` only
advances time.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1ExecAction,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1Probe,
)

from pykubelet.container import ContainerID, ProbeResult
from pykubelet.prober.metrics import PROBER_REGISTRY
from pykubelet.prober.results import ResultsManager
from pykubelet.prober.worker import ProbeType, ProbeWorker

NOW = 1_800_000_000.0


class FakeClock:
    """Wall-clock seconds that move only when a worker sleeps or a test says so."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class ScriptedProber:
    """Answers from a script (then ``default``); an exception in the script is raised."""

    def __init__(self, *script: ProbeResult | Exception,
                 default: ProbeResult = ProbeResult.SUCCESS,
                 clock: Callable[[], float] = lambda: 0.0) -> None:
        self.script = list(script)
        self.default = default
        self.clock = clock
        self.calls: list[tuple[str, ContainerID, float]] = []

    async def probe(self, probe_type: str, pod: V1Pod, status: V1PodStatus,
                    container: V1Container, container_id: ContainerID) -> ProbeResult:
        self.calls.append((probe_type, container_id, self.clock()))
        answer = self.script.pop(0) if self.script else self.default
        if isinstance(answer, Exception):
            raise answer
        return answer


class StatusBoard:
    """The status manager's cache of API statuses, by pod uid."""

    def __init__(self) -> None:
        self.statuses: dict[str, V1PodStatus] = {}

    def get(self, uid: str) -> V1PodStatus | None:
        return self.statuses.get(uid)

    def put(self, uid: str, *container_statuses: V1ContainerStatus,
            phase: str = "Running") -> V1PodStatus:
        status = V1PodStatus(phase=phase, pod_ip="10.88.0.5",
                             container_statuses=list(container_statuses))
        self.statuses[uid] = status
        return status


def exec_probe(*, period: int = 10, initial_delay: int = 0, failure: int = 3,
               success: int = 1, timeout: int = 1) -> V1Probe:
    return V1Probe(_exec=V1ExecAction(command=["true"]), period_seconds=period,
                   initial_delay_seconds=initial_delay, failure_threshold=failure,
                   success_threshold=success, timeout_seconds=timeout)


def make_pod(uid: str = "uid-1", *, name: str = "web", liveness: V1Probe | None = None,
             readiness: V1Probe | None = None, startup: V1Probe | None = None,
             restart_policy: str = "Always", deleting: bool = False,
             init_containers: list[V1Container] | None = None) -> V1Pod:
    container = V1Container(name="app", image="busybox", liveness_probe=liveness,
                            readiness_probe=readiness, startup_probe=startup)
    meta = V1ObjectMeta(name=name, namespace="default", uid=uid)
    if deleting:
        meta.deletion_timestamp = datetime.now(UTC)
    return V1Pod(metadata=meta, spec=V1PodSpec(containers=[container],
                                              init_containers=init_containers,
                                              restart_policy=restart_policy))


def running(cid: str, *, started_at: float = NOW - 100, started: bool = True,
            name: str = "app") -> V1ContainerStatus:
    return V1ContainerStatus(
        name=name, container_id=f"containerd://{cid}", image="busybox", image_id="",
        ready=False, restart_count=0, started=started,
        state=V1ContainerState(running=V1ContainerStateRunning(
            started_at=datetime.fromtimestamp(started_at, UTC))))


def exited(cid: str, exit_code: int = 1, name: str = "app") -> V1ContainerStatus:
    return V1ContainerStatus(
        name=name, container_id=f"containerd://{cid}", image="busybox", image_id="",
        ready=False, restart_count=0, started=False,
        state=V1ContainerState(terminated=V1ContainerStateTerminated(exit_code=exit_code)))


def waiting(name: str = "app") -> V1ContainerStatus:
    return V1ContainerStatus(name=name, image="busybox", image_id="", ready=False,
                             restart_count=0, state=V1ContainerState(
                                 waiting=V1ContainerStateWaiting(reason="ContainerCreating")))


def cid(text: str) -> ContainerID:
    return ContainerID("containerd", text)


def probe_count(probe_type: str, result: str, pod: V1Pod, container: str = "app") -> float:
    value = PROBER_REGISTRY.get_sample_value("prober_probe_total", {
        "probe_type": probe_type, "result": result, "container": container,
        "pod": pod.metadata.name, "namespace": pod.metadata.namespace,
        "pod_uid": pod.metadata.uid})
    return value or 0.0


class Rig:
    """A worker plus everything it talks to."""

    def __init__(self, probe_type: ProbeType, pod: V1Pod, *script: ProbeResult | Exception,
                 default: ProbeResult = ProbeResult.SUCCESS,
                 terminating: set[str] | None = None, clock: FakeClock | None = None,
                 sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        self.clock = clock or FakeClock()
        self.board = StatusBoard()
        self.results = ResultsManager()
        self.prober = ScriptedProber(*script, default=default, clock=self.clock)
        self.pod = pod
        self.exits: list[ProbeWorker] = []
        doomed = terminating if terminating is not None else set()
        self.worker = ProbeWorker(
            probe_type, pod, pod.spec.containers[0], prober=self.prober, results=self.results,
            status_provider=self.board.get, is_terminating=doomed.__contains__,
            on_exit=self.exits.append, clock=self.clock, sleep=sleep or self.clock.sleep)

    def show(self, *statuses: V1ContainerStatus, phase: str = "Running") -> None:
        self.board.put(self.pod.metadata.uid, *statuses, phase=phase)

    async def steps(self, count: int) -> list[bool]:
        return [await self.worker.do_probe() for _ in range(count)]


# -- waiting for the container ---------------------------------------------------------


async def test_no_status_or_no_container_id_means_no_probe() -> None:
    rig = Rig(ProbeType.LIVENESS, make_pod(liveness=exec_probe()))
    assert await rig.worker.do_probe()
    rig.show(waiting())
    assert await rig.worker.do_probe()

    assert rig.prober.calls == []
    assert rig.worker.container_id is None


async def test_initial_delay_counts_from_started_at() -> None:
    rig = Rig(ProbeType.LIVENESS, make_pod(liveness=exec_probe(initial_delay=30)))
    rig.show(running("a", started_at=NOW - 20))

    await rig.worker.do_probe()
    assert rig.prober.calls == []
    # The initial verdict is published as soon as the instance is known.
    assert rig.results.get(cid("a")) is ProbeResult.SUCCESS

    rig.clock.now = NOW + 9
    await rig.worker.do_probe()
    assert rig.prober.calls == []

    rig.clock.now = NOW + 10
    await rig.worker.do_probe()
    assert [call[:2] for call in rig.prober.calls] == [("liveness", cid("a"))]


async def test_initial_values_per_probe_type() -> None:
    late = exec_probe(initial_delay=3600)
    pod = make_pod(liveness=late, readiness=late, startup=late)
    for probe_type, expected in ((ProbeType.LIVENESS, ProbeResult.SUCCESS),
                                 (ProbeType.READINESS, ProbeResult.FAILURE),
                                 (ProbeType.STARTUP, ProbeResult.UNKNOWN)):
        rig = Rig(probe_type, pod)
        rig.show(running("a", started=probe_type is not ProbeType.STARTUP))
        await rig.worker.do_probe()
        assert rig.results.get(cid("a")) is expected, probe_type


# -- thresholds ----------------------------------------------------------------------


async def test_liveness_fails_only_after_failure_threshold_consecutive_failures() -> None:
    F, S = ProbeResult.FAILURE, ProbeResult.SUCCESS
    rig = Rig(ProbeType.LIVENESS, make_pod(liveness=exec_probe(failure=3)), F, F, S, F, F, F)
    rig.show(running("a"))

    verdicts = []
    for _ in range(6):
        await rig.worker.do_probe()
        verdicts.append(rig.results.get(cid("a")))

    assert verdicts == [S, S, S, S, S, F]


async def test_readiness_needs_success_threshold_consecutive_successes() -> None:
    F, S = ProbeResult.FAILURE, ProbeResult.SUCCESS
    rig = Rig(ProbeType.READINESS, make_pod(readiness=exec_probe(success=2, failure=2)),
              S, F, S, S, F, F)
    rig.show(running("a"))

    verdicts = []
    for _ in range(6):
        await rig.worker.do_probe()
        verdicts.append(rig.results.get(cid("a")))

    assert verdicts == [F, F, F, S, S, F]


# -- restarts and holds --------------------------------------------------------------


async def test_new_container_id_resets_result_and_counts() -> None:
    F, S = ProbeResult.FAILURE, ProbeResult.SUCCESS
    rig = Rig(ProbeType.READINESS, make_pod(readiness=exec_probe(success=2)), S, S, S)
    rig.show(running("a"))
    await rig.steps(2)
    assert rig.results.get(cid("a")) is S

    rig.show(running("b"))
    await rig.worker.do_probe()

    assert rig.results.get(cid("a")) is None
    # One success on the new instance is below the threshold: still the initial Failure.
    assert rig.results.get(cid("b")) is F
    assert rig.prober.calls[-1][1] == cid("b")


async def test_liveness_worker_holds_after_failure_until_new_container() -> None:
    rig = Rig(ProbeType.LIVENESS, make_pod(liveness=exec_probe(failure=1)),
              ProbeResult.FAILURE, default=ProbeResult.SUCCESS)
    rig.show(running("a"))
    await rig.worker.do_probe()
    assert rig.results.get(cid("a")) is ProbeResult.FAILURE

    assert all(await rig.steps(3))
    assert len(rig.prober.calls) == 1
    assert rig.results.get(cid("a")) is ProbeResult.FAILURE

    rig.show(running("b"))
    await rig.worker.do_probe()
    assert len(rig.prober.calls) == 2
    assert rig.results.get(cid("b")) is ProbeResult.SUCCESS


async def test_not_running_container_is_a_failure_without_probing() -> None:
    rig = Rig(ProbeType.READINESS, make_pod(readiness=exec_probe(failure=1)))
    rig.show(running("a"))
    await rig.worker.do_probe()
    assert rig.results.get(cid("a")) is ProbeResult.SUCCESS

    rig.show(exited("a"))
    assert await rig.worker.do_probe()
    assert rig.results.get(cid("a")) is ProbeResult.FAILURE
    assert len(rig.prober.calls) == 1


async def test_worker_ends_when_container_exited_for_good() -> None:
    rig = Rig(ProbeType.READINESS, make_pod(readiness=exec_probe(), restart_policy="Never"))
    rig.show(exited("a"))
    assert not await rig.worker.do_probe()


async def test_worker_ends_when_pod_is_terminal() -> None:
    rig = Rig(ProbeType.LIVENESS, make_pod(liveness=exec_probe()))
    rig.show(running("a"), phase="Succeeded")
    assert not await rig.worker.do_probe()
    assert rig.prober.calls == []


# -- startup gating ---------------------------------------------------------------------


async def test_startup_probe_runs_until_started_and_others_wait_for_it() -> None:
    probe = exec_probe()
    pod = make_pod(liveness=probe, readiness=probe, startup=probe)
    for probe_type, probes_before, probes_after in ((ProbeType.STARTUP, 1, 0),
                                                    (ProbeType.LIVENESS, 0, 1),
                                                    (ProbeType.READINESS, 0, 1)):
        rig = Rig(probe_type, pod)
        rig.show(running("a", started=False))
        await rig.worker.do_probe()
        assert len(rig.prober.calls) == probes_before, probe_type

        rig.prober.calls.clear()
        rig.show(running("a", started=True))
        await rig.worker.do_probe()
        assert len(rig.prober.calls) == probes_after, probe_type


async def test_startup_failure_holds_the_worker() -> None:
    rig = Rig(ProbeType.STARTUP, make_pod(startup=exec_probe(failure=2)),
              default=ProbeResult.FAILURE)
    rig.show(running("a", started=False))
    await rig.steps(4)

    assert rig.results.get(cid("a")) is ProbeResult.FAILURE
    assert len(rig.prober.calls) == 2


# -- termination -----------------------------------------------------------------------


async def test_deleted_pod_liveness_reports_success_and_stops() -> None:
    rig = Rig(ProbeType.LIVENESS, make_pod(liveness=exec_probe(failure=1), deleting=True),
              default=ProbeResult.FAILURE)
    rig.show(running("a"))

    assert not await rig.worker.do_probe()
    assert rig.results.get(cid("a")) is ProbeResult.SUCCESS
    assert rig.prober.calls == []


async def test_readiness_is_false_while_pod_terminates() -> None:
    doomed: set[str] = set()
    rig = Rig(ProbeType.READINESS, make_pod(readiness=exec_probe()), terminating=doomed)
    rig.show(running("a"))
    await rig.worker.do_probe()
    assert rig.results.get(cid("a")) is ProbeResult.SUCCESS

    doomed.add("uid-1")
    assert await rig.worker.do_probe()
    assert rig.results.get(cid("a")) is ProbeResult.FAILURE
    assert len(rig.prober.calls) == 1


# -- errors and metrics ----------------------------------------------------------------


async def test_probe_that_could_not_run_keeps_verdict_and_run_and_counts_unknown() -> None:
    pod = make_pod("uid-err", name="err", liveness=exec_probe(failure=2))
    F = ProbeResult.FAILURE
    # A raising prober and an UNKNOWN answer (the prober's "errored") are alike.
    rig = Rig(ProbeType.LIVENESS, pod, F, RuntimeError("exec broke"), ProbeResult.UNKNOWN, F)
    rig.show(running("a"))

    assert all(await rig.steps(3))
    assert rig.results.get(cid("a")) is ProbeResult.SUCCESS
    assert probe_count("Liveness", "unknown", pod) == 2

    # The errors did not break the run: this is the second consecutive failure.
    await rig.worker.do_probe()
    assert rig.results.get(cid("a")) is F
    assert probe_count("Liveness", "failed", pod) == 2


async def test_metrics_count_results_with_labels_and_time_answers() -> None:
    pod = make_pod("uid-metrics", name="metrics", liveness=exec_probe(failure=5))
    S, F, U = ProbeResult.SUCCESS, ProbeResult.FAILURE, ProbeResult.UNKNOWN
    rig = Rig(ProbeType.LIVENESS, pod, S, S, F, U)
    rig.show(running("a"))
    await rig.steps(4)

    assert probe_count("Liveness", "successful", pod) == 2
    assert probe_count("Liveness", "failed", pod) == 1
    assert probe_count("Liveness", "unknown", pod) == 1
    assert probe_count("Readiness", "successful", pod) == 0
    timed = PROBER_REGISTRY.get_sample_value("prober_probe_duration_seconds_count", {
        "probe_type": "Liveness", "container": "app", "pod": "metrics",
        "namespace": "default"})
    assert timed == 3  # failures are not timed, as upstream


# -- the task --------------------------------------------------------------------------


async def test_worker_probes_every_period_and_cleans_up_on_stop() -> None:
    pod = make_pod("uid-cadence", name="cadence", readiness=exec_probe(period=7))
    rig = Rig(ProbeType.READINESS, pod)
    rig.show(running("a"))
    task = asyncio.create_task(rig.worker.run())
    while len(rig.prober.calls) < 4:
        await asyncio.sleep(0)
    rig.worker.stop()
    await asyncio.wait_for(task, 1)

    times = [call[2] for call in rig.prober.calls[:4]]
    assert [later - earlier for earlier, later in itertools.pairwise(times)] == [7, 7, 7]
    # A stopped worker leaves nothing behind: verdict, metric series, manager entry.
    assert rig.results.get(cid("a")) is None
    assert PROBER_REGISTRY.get_sample_value("prober_probe_total", {
        "probe_type": "Readiness", "result": "successful", "container": "app",
        "pod": "cadence", "namespace": "default", "pod_uid": "uid-cadence"}) is None
    assert rig.exits == [rig.worker]


async def test_trigger_probes_at_once_and_restarts_the_period() -> None:
    clock = FakeClock()
    never = asyncio.Event()

    async def held_sleep(seconds: float) -> None:
        clock.sleeps.append(seconds)
        await never.wait()  # no period ever elapses: only the trigger can wake the worker

    rig = Rig(ProbeType.READINESS, make_pod(readiness=exec_probe(period=10)), clock=clock,
              sleep=held_sleep)
    rig.show(running("a"))
    task = asyncio.create_task(rig.worker.run())
    while len(clock.sleeps) < 1:
        await asyncio.sleep(0)
    rig.clock.now += 4
    rig.worker.trigger()
    while len(rig.prober.calls) < 2:
        await asyncio.sleep(0)
    while len(rig.clock.sleeps) < 2:
        await asyncio.sleep(0)
    rig.worker.stop()
    await asyncio.wait_for(task, 1)

    assert rig.prober.calls[1][2] == NOW + 4
    # Without the reset the worker would wait only the 6 s left of the old period.
    assert rig.clock.sleeps == [10, 10]
