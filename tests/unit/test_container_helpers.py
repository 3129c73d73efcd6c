"""The one restart rule that both the runtime manager and status generation apply."""

from __future__ import annotations

import datetime

import pytest
from kubernetes_asyncio.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec

from pykubelet.container import ContainerID, ContainerState, ContainerStatus, PodStatus
from pykubelet.container.helpers import should_container_be_restarted


def pod_with(policy: str | None, container: V1Container, deleting: bool = False) -> V1Pod:
    meta = V1ObjectMeta(name="p", namespace="ns", uid="u1")
    if deleting:
        meta.deletion_timestamp = datetime.datetime.now(datetime.UTC)
    return V1Pod(metadata=meta, spec=V1PodSpec(restart_policy=policy, containers=[container]))


def status_with(state: ContainerState | None, exit_code: int = 0) -> PodStatus:
    status = PodStatus(id="u1", name="p", namespace="ns")
    if state is not None:
        status.container_statuses.append(ContainerStatus(
            id=ContainerID("containerd", "c1"), name="c", state=state, exit_code=exit_code))
    return status


APP = V1Container(name="c", image="busybox")
SIDECAR = V1Container(name="c", image="busybox", restart_policy="Always")


@pytest.mark.parametrize(("policy", "exit_code", "restarted"), [
    ("Always", 0, True), ("Always", 1, True),
    ("OnFailure", 0, False), ("OnFailure", 1, True),
    ("Never", 0, False), ("Never", 1, False),
    (None, 0, True),  # an undefaulted static pod behaves as Always
])
def test_an_exited_app_container_follows_the_pod_policy(policy: str | None, exit_code: int,
                                                         restarted: bool) -> None:
    pod = pod_with(policy, APP)
    assert should_container_be_restarted(
        APP, pod, status_with(ContainerState.EXITED, exit_code)) is restarted


@pytest.mark.parametrize("policy", ["Always", "OnFailure", "Never"])
@pytest.mark.parametrize("exit_code", [0, 1])
def test_a_sidecar_runs_again_whatever_the_pod_policy(policy: str, exit_code: int) -> None:
    pod = pod_with(policy, SIDECAR)
    assert should_container_be_restarted(
        SIDECAR, pod, status_with(ContainerState.EXITED, exit_code))


@pytest.mark.parametrize(("state", "restarted"), [
    (None, True),  # never ran (or every instance was garbage collected)
    (ContainerState.RUNNING, False),
    (ContainerState.CREATED, True),
    (ContainerState.UNKNOWN, True),
])
def test_states_other_than_exited_ignore_the_policy(state: ContainerState | None,
                                                    restarted: bool) -> None:
    pod = pod_with("Never", APP)
    assert should_container_be_restarted(APP, pod, status_with(state)) is restarted


@pytest.mark.parametrize("container", [APP, SIDECAR])
def test_a_pod_being_deleted_restarts_nothing(container: V1Container) -> None:
    pod = pod_with("Always", container, deleting=True)
    assert not should_container_be_restarted(container, pod, status_with(None))
    assert not should_container_be_restarted(
        container, pod, status_with(ContainerState.EXITED, 1))
