"""The fault benchmark's own rules (testsupport/faults.py): its schedule, and the verdict on
a counted pod, which must catch a container run twice or a status the runtime contradicts."""

from __future__ import annotations

from kubernetes_asyncio import client

from testsupport.faults import (
    ALWAYS,
    ALWAYS_CRASHES,
    API_OUTAGE,
    CONTAINERD,
    DISK_FULL,
    KILL,
    KUBELET_STOP,
    NEVER_DONE,
    NEVER_RUNNING,
    FaultDurations,
    judge_counted,
    schedule,
)


def pod(phase: str, *, restarts: int = 0, container_id: str = "containerd://abc",
        running: bool = True) -> client.V1Pod:
    state = client.V1ContainerState(
        running=client.V1ContainerStateRunning() if running else None,
        terminated=None if running else client.V1ContainerStateTerminated(exit_code=0))
    status = client.V1ContainerStatus(name="main", image="busybox", image_id="", ready=running,
                                      restart_count=restarts, container_id=container_id,
                                      state=state)
    return client.V1Pod(status=client.V1PodStatus(phase=phase, container_statuses=[status]))


def test_a_never_pod_started_twice_is_caught_even_with_one_running_container() -> None:
    assert judge_counted(NEVER_RUNNING, 2, pod("Running"), ["abc"]).verdict == \
        "2 starts (restartPolicy Never)"
    assert judge_counted(NEVER_RUNNING, 1, pod("Running"), ["abc"]).verdict == "ok"


def test_a_finished_never_pod_is_ok_only_succeeded_with_nothing_running() -> None:
    done = pod("Succeeded", running=False)
    assert judge_counted(NEVER_DONE, 1, done, []).verdict == "ok"
    assert judge_counted(NEVER_DONE, 1, done, ["abc"]).verdict == \
        "1 running containers in the runtime"
    assert judge_counted(NEVER_DONE, 0, pod("Pending", running=False), []).verdict == \
        "0 starts (restartPolicy Never)"


def test_an_always_pod_needs_starts_equal_to_restart_count_plus_one() -> None:
    converged = ALWAYS_CRASHES + 1
    assert judge_counted(ALWAYS, converged, pod("Running", restarts=converged - 1),
                         ["abc"]).verdict == "ok"
    assert judge_counted(ALWAYS, converged + 1, pod("Running", restarts=converged - 1),
                         ["abc"]).verdict == f"{converged + 1} starts, restartCount " \
                                             f"{converged - 1}"


def test_the_api_showing_another_container_than_the_runtime_runs_is_caught() -> None:
    verdict = judge_counted(NEVER_RUNNING, 1, pod("Running", container_id="containerd://old"),
                            ["new"]).verdict
    assert verdict.startswith("API container containerd://old")
    assert judge_counted(ALWAYS, ALWAYS_CRASHES + 1,
                         pod("Running", restarts=ALWAYS_CRASHES), ["a", "b"]).verdict == \
        "2 running containers in the runtime"


def test_the_schedule_interleaves_kills_and_fits_the_faults_in_the_churn() -> None:
    durations = FaultDurations()
    planned = schedule([KILL, CONTAINERD, API_OUTAGE, KUBELET_STOP, DISK_FULL], 5, 600.0,
                       durations)
    assert [fault for _, fault in planned] == [
        KILL, CONTAINERD, KILL, API_OUTAGE, KILL, KUBELET_STOP, KILL, DISK_FULL, KILL]
    offsets = [at for at, _ in planned]
    assert offsets == sorted(offsets)
    assert offsets[-1] < 600.0
    assert schedule([KILL], 2, 60.0, durations) == [(20.0, KILL), (40.0, KILL)]
