"""Which container instance ``kubectl logs`` reads (upstream validateContainerLogStatus)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import (
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1PodStatus,
)

from pykubelet.kubelet.server_host import validate_container_log_status
from pykubelet.server.server import ContainerLogsError


def status(state: V1ContainerState, last: V1ContainerState | None = None,
           container_id: str = "containerd://now") -> V1PodStatus:
    return V1PodStatus(container_statuses=[V1ContainerStatus(
        name="app", image="i", image_id="", ready=False, restart_count=1,
        container_id=container_id, state=state, last_state=last or V1ContainerState())])


RUNNING = V1ContainerState(running=V1ContainerStateRunning())
CRASHED = V1ContainerState(terminated=V1ContainerStateTerminated(
    exit_code=1, container_id="containerd://before"))


def test_running_container_and_its_previous_instance() -> None:
    pod = status(RUNNING, CRASHED)
    assert validate_container_log_status("web", pod, "app", False) == "containerd://now"
    assert validate_container_log_status("web", pod, "app", True) == "containerd://before"


def test_waiting_after_a_crash_shows_the_last_instance() -> None:
    waiting = V1ContainerState(waiting=V1ContainerStateWaiting(reason="CrashLoopBackOff"))
    assert validate_container_log_status("web", status(waiting, CRASHED), "app",
                                         False) == "containerd://before"


@pytest.mark.parametrize(("pod_status", "previous", "message"), [
    (status(RUNNING), True, 'previous terminated container "app" in pod "web" not found'),
    (status(V1ContainerState(waiting=V1ContainerStateWaiting(reason="ErrImagePull"))), False,
     'container "app" in pod "web" is waiting to start: image can\'t be pulled'),
    (status(V1ContainerState(waiting=V1ContainerStateWaiting(reason="ContainerCreating"))),
     False, 'container "app" in pod "web" is waiting to start: ContainerCreating'),
    (status(V1ContainerState()), False,
     'container "app" in pod "web" is waiting to start - no logs yet'),
    (V1PodStatus(), False, 'container "app" in pod "web" is not available'),
])
def test_upstream_messages(pod_status: V1PodStatus, previous: bool, message: str) -> None:
    with pytest.raises(ContainerLogsError) as caught:
        validate_container_log_status("web", pod_status, "app", previous)
    assert str(caught.value) == message
