"""Pod-spec rules every layer applies the same way (upstream ``kubecontainer`` helpers).

Whether a container runs again after it exits is decided in two places: the
runtime manager, which restarts it, and status generation, which reports it
``Waiting`` rather than ``Terminated`` because a restart is coming. Both must
give the same answer, or a pod would show a container as finished while the
kubelet brings it back. So the restart rules live here, once, on the ground
floor, beside the conversion of a runtime status into the running pod a kill
acts on.
"""

from __future__ import annotations

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api import is_restartable_init_container
from pykubelet.container import Container, ContainerID, ContainerState, Pod, PodStatus

RESTART_POLICY_ALWAYS = "Always"
RESTART_POLICY_ON_FAILURE = "OnFailure"
RESTART_POLICY_NEVER = "Never"


def restart_policy(pod: V1Pod) -> str:
    """The pod's restart policy; an unset one is ``Always``, the API server's default."""
    return (pod.spec.restart_policy if pod.spec is not None else None) or RESTART_POLICY_ALWAYS


def should_restart_on_failure(pod: V1Pod) -> bool:
    return restart_policy(pod) != RESTART_POLICY_NEVER


def has_restartable_init_container(pod: V1Pod | None) -> bool:
    if pod is None or pod.spec is None:
        return False
    return any(is_restartable_init_container(c) for c in pod.spec.init_containers or ())


def container_restart_policy(container: V1Container, pod: V1Pod) -> str:
    """The policy that governs one container: its own when it sets one, else the pod's.

    Only sidecars set one today (``Always``); they run again whatever the
    pod's policy says, as upstream's ``ContainerShouldRestart`` decides.
    """
    return container.restart_policy or restart_policy(pod)


def should_container_be_restarted(container: V1Container, pod: V1Pod,
                                  status: PodStatus) -> bool:
    """Upstream ``ShouldContainerBeRestarted``: the restart policy applied to the newest run.

    A pod being deleted restarts nothing; a container never run, or left in
    ``created`` / ``unknown``, is (re)started; a running one is left alone; an
    exited one follows its restart policy and exit code.
    """
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return False
    latest = status.find_container_status(container.name)
    if latest is None:
        return True
    if latest.state == ContainerState.RUNNING:
        return False
    if latest.state in (ContainerState.UNKNOWN, ContainerState.CREATED):
        return True
    policy = container_restart_policy(container, pod)
    if policy == RESTART_POLICY_NEVER:
        return False
    return not (policy == RESTART_POLICY_ON_FAILURE and latest.exit_code == 0)


def nanos_to_seconds(nanos: int) -> float:
    """CRI timestamps are nanoseconds since the epoch; the model keeps float seconds."""
    return nanos / 1e9


def sandbox_state_to_container_state(state: int) -> ContainerState:
    if state == api_pb2.SANDBOX_READY:
        return ContainerState.RUNNING
    if state == api_pb2.SANDBOX_NOTREADY:
        return ContainerState.EXITED
    return ContainerState.UNKNOWN


def running_pod_from_status(status: PodStatus, runtime_type: str) -> Pod:
    """Upstream ``ConvertPodStatusToRunningPod``: running containers and all sandboxes."""
    pod = Pod(id=status.id, name=status.name, namespace=status.namespace)
    for cs in status.container_statuses:
        if cs.state != ContainerState.RUNNING:
            continue
        pod.containers.append(Container(id=cs.id, name=cs.name, image=cs.image,
                                        image_id=cs.image_id, image_ref=cs.image_ref,
                                        hash=cs.hash, state=cs.state, created_at=cs.created_at))
    for sandbox in status.sandbox_statuses:
        state = (ContainerState.RUNNING if sandbox.state == api_pb2.SANDBOX_READY
                 else ContainerState.EXITED)
        pod.sandboxes.append(Container(id=ContainerID(runtime_type, sandbox.id),
                                       name=sandbox.metadata.name, state=state,
                                       created_at=nanos_to_seconds(sandbox.created_at)))
    return pod


__all__ = [
    "RESTART_POLICY_ALWAYS",
    "RESTART_POLICY_NEVER",
    "RESTART_POLICY_ON_FAILURE",
    "container_restart_policy",
    "has_restartable_init_container",
    "is_restartable_init_container",
    "nanos_to_seconds",
    "restart_policy",
    "running_pod_from_status",
    "sandbox_state_to_container_state",
    "should_container_be_restarted",
    "should_restart_on_failure",
]
