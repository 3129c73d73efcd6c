"""The status manager's guarantees: what a client reading pod statuses can rely on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio.client import V1Pod, V1PodStatus

from pykubelet.container import ContainerState
from pykubelet.status.manager import StatusManager
from tests.unit.test_status_generate import (
    UID,
    condition,
    container,
    generate,
    instance,
    make_pod,
    runtime,
)

T0 = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def status_of(manager: StatusManager) -> V1PodStatus:
    status = manager.get_pod_status(UID)
    assert status is not None
    return status


def running_status(pod: V1Pod, **kwargs: Any) -> V1PodStatus:
    return generate(pod, runtime(instance("app", ContainerState.RUNNING)), **kwargs)


def test_terminal_phase_never_regresses() -> None:
    pod = make_pod(restart_policy="Always")
    manager = StatusManager()
    failed = generate(pod, runtime(instance("app", ContainerState.EXITED, exit_code=1)),
                      pod_is_terminal=True)
    assert failed.phase == "Failed"
    manager.set_pod_status(pod, failed)

    manager.set_pod_status(pod, running_status(pod))
    assert status_of(manager).phase == "Failed"


def test_terminated_container_cannot_restart_under_never() -> None:
    pod = make_pod(restart_policy="Never")
    manager = StatusManager()
    manager.set_pod_status(pod, generate(pod, runtime(instance("app", ContainerState.EXITED))))

    manager.set_pod_status(pod, running_status(pod))
    status = status_of(manager)
    assert container(status, "app").state.terminated is not None
    assert status.phase == "Succeeded"


def test_failed_container_may_restart_under_on_failure() -> None:
    pod = make_pod(restart_policy="OnFailure")
    manager = StatusManager()
    manager.set_pod_status(pod, generate(
        pod, runtime(instance("app", ContainerState.EXITED, exit_code=1))))

    manager.set_pod_status(pod, running_status(pod))
    assert container(status_of(manager), "app").state.running is not None


def test_start_and_transition_times_are_kept_and_second_precise() -> None:
    pod = make_pod()
    clock = Clock(T0)
    manager = StatusManager(now=clock)
    manager.set_pod_status(pod, generate(pod, runtime(), now=T0))
    first = status_of(manager)
    assert first.start_time == T0.replace(microsecond=0)

    clock.now = T0 + timedelta(minutes=2)
    manager.set_pod_status(pod, running_status(pod, now=clock.now))
    second = status_of(manager)
    assert second.start_time == first.start_time
    assert condition(second, "PodScheduled").last_transition_time == T0.replace(microsecond=0)
    assert condition(second, "Ready").last_transition_time == clock.now.replace(microsecond=0)


def test_terminate_pod_marks_unfinished_containers_failed() -> None:
    pod = make_pod(["app", "helper"])
    manager = StatusManager()
    manager.set_pod_status(pod, generate(pod, runtime(
        instance("app", ContainerState.RUNNING),
        instance("helper", ContainerState.EXITED, exit_code=0))))

    manager.terminate_pod(pod)
    status = status_of(manager)
    app = container(status, "app").state.terminated
    assert (app.reason, app.exit_code) == ("ContainerStatusUnknown", 137)
    assert container(status, "helper").state.terminated.reason == "Completed"
    assert status.phase == "Failed"


def test_terminate_static_pod_keeps_its_phase() -> None:
    pod = make_pod()
    pod.metadata.annotations = {"kubernetes.io/config.source": "file"}
    manager = StatusManager()
    manager.set_pod_status(pod, running_status(pod))

    manager.terminate_pod(pod)
    status = status_of(manager)
    assert status.phase == "Running"
    assert container(status, "app").state.terminated.reason == "ContainerStatusUnknown"


def test_container_readiness_updates_ready_conditions() -> None:
    pod = make_pod([{"name": "app", "readinessProbe": {"exec": {"command": ["true"]}}}])
    manager = StatusManager()
    manager.set_pod_status(pod, running_status(pod))
    assert condition(status_of(manager), "Ready").status == "False"

    manager.set_container_readiness(UID, "containerd://app-0", True)
    status = status_of(manager)
    assert container(status, "app").ready is True
    assert condition(status, "Ready").status == "True"
    assert condition(status, "ContainersReady").status == "True"


def test_orphaned_statuses_are_forgotten() -> None:
    pod = make_pod()
    manager = StatusManager()
    manager.set_pod_status(pod, running_status(pod))

    manager.remove_orphaned_statuses({UID})
    assert manager.get_pod_status(UID) is not None
    manager.remove_orphaned_statuses(set())
    assert manager.get_pod_status(UID) is None


def test_readers_get_copies() -> None:
    pod = make_pod()
    manager = StatusManager()
    manager.set_pod_status(pod, running_status(pod))

    status_of(manager).phase = "Failed"
    assert status_of(manager).phase == "Running"
    assert manager.pod_with_status(pod).status.phase == "Running"
    assert pod.status is None


def test_long_termination_messages_are_bounded() -> None:
    pod = make_pod(restart_policy="Never")
    manager = StatusManager()
    manager.set_pod_status(pod, generate(pod, runtime(instance(
        "app", ContainerState.EXITED, exit_code=1, message="x" * 20000))))
    assert len(container(status_of(manager), "app").state.terminated.message) == 12 * 1024
