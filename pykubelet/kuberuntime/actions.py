"""What one pod sync must do, decided from the pod spec and the runtime's status alone.

Upstream's ``computePodActions`` is the heart of the kubelet: every sync
compares the desired pod with what the runtime reports and derives a plan
(recreate the sandbox, which init/sidecar/app containers to start, which
containers to kill). Keeping the decision free of I/O lets every restart rule
be tested with hand-built ``PodStatus`` values, and lets the manager execute
the plan without re-deciding anything.

The rules followed here are upstream's with the SidecarContainers behaviour
(``computeInitContainerActions``): restartable init containers (``restartPolicy:
Always`` on an init container) count as initialised once running and are kept
running next to the app containers.

It also holds the CrashLoopBackOff decision (``doBackOff``), which reads and
records into a ``Backoff`` but touches no runtime.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet.api import pod_desc
from pykubelet.container import (
    ContainerID,
    ContainerState,
    ContainerStatus,
    PodStatus,
    ProbeResult,
    ProbeResults,
)
from pykubelet.container.helpers import (
    RESTART_POLICY_ON_FAILURE,
    is_restartable_init_container,
    restart_policy,
    should_container_be_restarted,
    should_restart_on_failure,
)
from pykubelet.kuberuntime.hash import container_hash_matches, hash_container
from pykubelet.util import klog
from pykubelet.util.backoff import Backoff

# The runtime's own reason for a container the kernel killed for memory.
OOM_KILLED_REASON = "OOMKilled"


class KillReason(enum.StrEnum):
    """Why a container is killed; it selects a probe's own grace period (upstream)."""

    NONE = ""
    STARTUP_PROBE = "StartupProbe"
    LIVENESS_PROBE = "LivenessProbe"
    FAILED_POST_START_HOOK = "FailedPostStartHook"
    UNKNOWN = "Unknown"


@dataclass
class ContainerToKill:
    name: str
    container: V1Container | None
    message: str
    reason: KillReason = KillReason.NONE


@dataclass
class PodActions:
    """The plan of one sync. Indexes point into ``spec.init_containers`` / ``spec.containers``."""

    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_id: str = ""
    attempt: int = 0
    init_containers_to_start: list[int] = field(default_factory=list)
    containers_to_start: list[int] = field(default_factory=list)
    containers_to_kill: dict[ContainerID, ContainerToKill] = field(default_factory=dict)
    ephemeral_containers_to_start: list[int] = field(default_factory=list)

    def is_noop(self) -> bool:
        return not (self.kill_pod or self.create_sandbox or self.init_containers_to_start
                    or self.containers_to_start or self.containers_to_kill
                    or self.ephemeral_containers_to_start)

    def __str__(self) -> str:
        kills = {str(cid): info.name for cid, info in self.containers_to_kill.items()}
        return (f"KillPod: {self.kill_pod}, CreateSandbox: {self.create_sandbox}, "
                f"Attempt: {self.attempt}, InitContainersToStart: "
                f"{self.init_containers_to_start}, ContainersToStart: {self.containers_to_start}, "
                f"EphemeralContainersToStart: {self.ephemeral_containers_to_start}, "
                f"ContainersToKill: {kills}")



def is_host_network_pod(pod: V1Pod) -> bool:
    return bool(pod.spec is not None and pod.spec.host_network)


def network_namespace_mode(pod: V1Pod) -> int:
    return api_pb2.NODE if is_host_network_pod(pod) else api_pb2.POD


def _containers(pod: V1Pod) -> list[V1Container]:
    return list((pod.spec.containers if pod.spec is not None else None) or [])


def _init_containers(pod: V1Pod) -> list[V1Container]:
    return list((pod.spec.init_containers if pod.spec is not None else None) or [])


def is_init_container_failed(status: ContainerStatus) -> bool:
    if status.reason == OOM_KILLED_REASON:
        return True
    if status.state == ContainerState.EXITED and status.exit_code != 0:
        return True
    return status.state == ContainerState.UNKNOWN


def container_succeeded(container: V1Container, status: PodStatus) -> bool:
    latest = status.find_container_status(container.name)
    return (latest is not None and latest.state == ContainerState.EXITED
            and latest.exit_code == 0)


def container_changed(container: V1Container, status: ContainerStatus) -> bool:
    # The Go kubelet 1.20's hash or v1.35's (kuberuntime/hash.py says why both).
    return not container_hash_matches(container, status.hash)


@dataclass(frozen=True)
class SandboxDecision:
    create: bool
    attempt: int
    sandbox_id: str


def pod_sandbox_changed(pod: V1Pod, status: PodStatus) -> SandboxDecision:
    """Upstream ``PodSandboxChanged``: whether a (new) sandbox is needed, and its attempt."""
    sandboxes: Sequence[api_pb2.PodSandboxStatus] = status.sandbox_statuses
    if not sandboxes:
        klog.v(2).info("No sandbox for pod can be found. Need to start a new one",
                       pod=pod_desc(pod))
        return SandboxDecision(True, 0, "")
    ready_count = sum(1 for s in sandboxes if s.state == api_pb2.SANDBOX_READY)
    max_attempt = max(s.metadata.attempt for s in sandboxes)
    newest = sandboxes[0]
    if ready_count > 1:
        klog.v(2).info("Multiple sandboxes are ready for Pod. Need to reconcile them",
                       pod=pod_desc(pod))
        return SandboxDecision(True, max_attempt + 1, newest.id)
    if newest.state != api_pb2.SANDBOX_READY:
        klog.v(2).info("No ready sandbox for pod can be found. Need to start a new one",
                       pod=pod_desc(pod))
        return SandboxDecision(True, max_attempt + 1, newest.id)
    if newest.linux.namespaces.options.network != network_namespace_mode(pod):
        klog.v(2).info("Sandbox for pod has changed. Need to start a new one", pod=pod_desc(pod))
        return SandboxDecision(True, max_attempt + 1, "")
    if not is_host_network_pod(pod) and newest.HasField("network") and not newest.network.ip:
        klog.v(2).info("Sandbox for pod has no IP address. Need to start a new one",
                       pod=pod_desc(pod))
        return SandboxDecision(True, max_attempt + 1, newest.id)
    return SandboxDecision(False, max_attempt, newest.id)


def _has_any_regular_container_created(pod: V1Pod, status: PodStatus) -> bool:
    for container in _containers(pod):
        latest = status.find_container_status(container.name)
        if latest is not None and latest.state in (
                ContainerState.CREATED, ContainerState.RUNNING, ContainerState.EXITED):
            return True
    return False


def _unknown_state_kill(container: V1Container, status: ContainerStatus,
                        what: str) -> ContainerToKill:
    return ContainerToKill(
        name=container.name, container=container,
        message=f'{what} is in "{status.state}" state, try killing it before restart',
        reason=KillReason.UNKNOWN)


def _compute_init_container_actions(pod: V1Pod, status: PodStatus, changes: PodActions,
                                    liveness: ProbeResults | None,
                                    startup: ProbeResults | None) -> bool:
    """Fill in the init/sidecar part of ``changes``; True once the pod is initialised.

    The init containers are walked from the last to the first: finished init
    containers may have been garbage collected, so the newest evidence of
    progress is the one to trust.
    """
    init_containers = _init_containers(pod)
    if not init_containers:
        return True

    # A created or running app container proves initialisation happened, even if
    # the init containers' records are gone. An exited one does not: after a node
    # reboot every container is exited and the new sandbox starts from scratch.
    pod_has_initialized = any(
        (latest := status.find_container_status(c.name)) is not None
        and latest.state in (ContainerState.CREATED, ContainerState.RUNNING)
        for c in _containers(pod))
    previously_initialized = pod_has_initialized
    restart_on_failure = should_restart_on_failure(pod)
    to_start: list[int] = []
    last = len(init_containers) - 1

    for index in range(last, -1, -1):
        container = init_containers[index]
        restartable = is_restartable_init_container(container)
        latest = status.find_container_status(container.name)
        if latest is None:
            if previously_initialized and restartable:
                to_start.append(index)
            continue
        if previously_initialized and not restartable:
            continue

        if latest.state == ContainerState.CREATED:
            # Created but never started: the runtime failed the start; start it anew.
            to_start.append(index)
        elif latest.state == ContainerState.RUNNING:
            if restartable:
                _running_sidecar_actions(pod, index, container, latest, changes, to_start,
                                         previously_initialized, liveness, startup)
                if index == last and _sidecar_started(container, latest, startup):
                    pod_has_initialized = True
        elif latest.state == ContainerState.EXITED:
            if restartable:
                to_start.append(index)
            elif is_init_container_failed(latest):
                if not restart_on_failure:
                    changes.kill_pod = True
                    changes.init_containers_to_start = []
                    return False
                to_start.append(index)
            else:
                klog.v(4).info("Init container has been initialized", pod=pod_desc(pod),
                               container=container.name)
                if index == last:
                    pod_has_initialized = True
                else:
                    to_start.append(index + 1)
        else:
            if restartable:
                changes.containers_to_kill[latest.id] = _unknown_state_kill(
                    container, latest, "Init container")
                to_start.append(index)
            else:
                if not restart_on_failure:
                    changes.kill_pod = True
                    changes.init_containers_to_start = []
                    return False
                changes.containers_to_kill[latest.id] = _unknown_state_kill(
                    container, latest, "Init container")
                to_start.append(index)

        previously_initialized = True

    if not previously_initialized:
        to_start.append(0)
    # Collected backwards; start them in spec order.
    changes.init_containers_to_start = list(reversed(to_start))
    return pod_has_initialized


def _sidecar_started(container: V1Container, latest: ContainerStatus,
                     startup: ProbeResults | None) -> bool:
    """A running sidecar counts as started unless a startup probe has yet to succeed."""
    if container.startup_probe is None or startup is None:
        return True
    return startup.get(latest.id) == ProbeResult.SUCCESS


def _running_sidecar_actions(pod: V1Pod, index: int, container: V1Container,
                             latest: ContainerStatus, changes: PodActions, to_start: list[int],
                             previously_initialized: bool, liveness: ProbeResults | None,
                             startup: ProbeResults | None) -> None:
    if container.startup_probe is not None and startup is not None:
        verdict = startup.get(latest.id)
        if verdict is None:
            return  # wait for the first startup probe
        if verdict != ProbeResult.SUCCESS:
            if verdict == ProbeResult.FAILURE:
                changes.containers_to_kill[latest.id] = ContainerToKill(
                    container.name, container,
                    f"Init container {container.name} failed startup probe",
                    KillReason.STARTUP_PROBE)
                to_start.append(index)
            return

    klog.v(4).info("Init container has been initialized", pod=pod_desc(pod),
                   container=container.name)
    last = len(_init_containers(pod)) - 1
    if index != last and not previously_initialized:
        to_start.append(index + 1)

    if container_changed(container, latest):
        changes.containers_to_kill[latest.id] = ContainerToKill(
            container.name, container, f"Init container {container.name} definition changed")
        to_start.append(index)
        return

    # A sidecar's liveness does not hold back the next init container, it only restarts it.
    if (container.liveness_probe is not None and liveness is not None
            and liveness.get(latest.id) == ProbeResult.FAILURE):
        changes.containers_to_kill[latest.id] = ContainerToKill(
            container.name, container, f"Init container {container.name} failed liveness probe",
            KillReason.LIVENESS_PROBE)
        to_start.append(index)


def compute_pod_actions(pod: V1Pod, status: PodStatus, *,
                        liveness: ProbeResults | None = None,
                        startup: ProbeResults | None = None) -> PodActions:
    """Upstream ``computePodActions``: the plan that moves ``status`` towards ``pod``.

    ``liveness``/``startup`` are the prober's results; without them no container
    is killed for a probe (the seam the prober plugs into).
    """
    sandbox = pod_sandbox_changed(pod, status)
    changes = PodActions(kill_pod=sandbox.create, create_sandbox=sandbox.create,
                         sandbox_id=sandbox.sandbox_id, attempt=sandbox.attempt)
    containers = _containers(pod)

    if sandbox.create:
        if (not should_restart_on_failure(pod) and sandbox.attempt != 0
                and status.container_statuses):
            # Everything already ran once and must not run again: only clean up.
            changes.create_sandbox = False
            return changes
        to_start = [index for index, c in enumerate(containers)
                    if not (restart_policy(pod) == RESTART_POLICY_ON_FAILURE
                            and container_succeeded(c, status))]
        if not to_start and _has_any_regular_container_created(pod, status):
            changes.create_sandbox = False
            return changes
        if _init_containers(pod):
            changes.init_containers_to_start = [0]
            return changes
        changes.containers_to_start = to_start
        return changes

    ephemeral = (pod.spec.ephemeral_containers if pod.spec is not None else None) or []
    for index, ec in enumerate(ephemeral):
        if status.find_container_status(ec.name) is None:
            changes.ephemeral_containers_to_start.append(index)

    initialized = _compute_init_container_actions(pod, status, changes, liveness, startup)
    if changes.kill_pod or not initialized:
        return changes

    keep_count = 0
    for index, container in enumerate(containers):
        latest = status.find_container_status(container.name)
        if latest is None or latest.state != ContainerState.RUNNING:
            if should_container_be_restarted(container, pod, status):
                klog.v(3).info("Container of pod is not in the desired state and shall be started",
                               containerName=container.name, pod=pod_desc(pod))
                changes.containers_to_start.append(index)
                if latest is not None and latest.state == ContainerState.UNKNOWN:
                    # Never risk two live instances of one container.
                    changes.containers_to_kill[latest.id] = _unknown_state_kill(
                        container, latest, "Container")
            continue

        restart = should_restart_on_failure(pod)
        reason = KillReason.NONE
        if container_changed(container, latest):
            message = f"Container {container.name} definition changed"
            restart = True  # a new spec runs whatever the restart policy says
        elif (liveness is not None
              and liveness.get(latest.id) == ProbeResult.FAILURE):
            message = f"Container {container.name} failed liveness probe"
            reason = KillReason.LIVENESS_PROBE
        elif (startup is not None
              and startup.get(latest.id) == ProbeResult.FAILURE):
            message = f"Container {container.name} failed startup probe"
            reason = KillReason.STARTUP_PROBE
        else:
            keep_count += 1
            continue

        if restart:
            message = f"{message}, will be restarted"
            changes.containers_to_start.append(index)
        changes.containers_to_kill[latest.id] = ContainerToKill(
            container.name, container, message, reason)
        klog.v(2).info("Message for Container of pod", containerName=container.name,
                       containerStatusID=str(latest.id), pod=pod_desc(pod),
                       containerMessage=message)

    if keep_count == 0 and not changes.containers_to_start:
        # Nothing left to run: stop the sandbox, and do not let sidecars keep it alive.
        changes.kill_pod = True
        changes.init_containers_to_start = []
    return changes


# --- CrashLoopBackOff -------------------------------------------------------------------

CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"


def backoff_key(pod: V1Pod, container: V1Container) -> str:
    """Upstream ``GetStableKey``: a new spec hash starts a fresh back-off."""
    meta = pod.metadata
    name, namespace, uid = ((meta.name or "", meta.namespace or "", meta.uid or "")
                            if meta is not None else ("", "", ""))
    return f"{name}_{namespace}_{uid}_{container.name}_{hash_container(container):x}"


def format_go_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` prints it (``10s``, ``5m0s``, ``1h2m3s``)."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    remaining = abs(seconds)
    if remaining < 1:
        millis = remaining * 1000
        return f"{sign}{millis:g}ms"
    hours, remaining = divmod(remaining, 3600)
    minutes, secs = divmod(remaining, 60)
    text = f"{round(secs, 9):g}s"
    if hours:
        text = f"{int(hours)}h{int(minutes)}m{text}"
    elif minutes:
        text = f"{int(minutes)}m{text}"
    return sign + text


def check_restart_backoff(pod: V1Pod, container: V1Container, status: PodStatus,
                          backoff: Backoff) -> str | None:
    """Upstream ``doBackOff``: the CrashLoopBackOff message while the restart must wait.

    Returns None when the container may start now; that restart is then
    recorded in ``backoff`` so the next failure waits twice as long. The wait
    is measured from the newest exited instance's finish time.
    """
    exited = next((s for s in status.container_statuses
                   if s.name == container.name and s.state == ContainerState.EXITED), None)
    if exited is None:
        return None
    klog.v(3).info("Checking backoff for container in pod", containerName=container.name,
                   pod=pod_desc(pod))
    key = backoff_key(pod, container)
    if backoff.is_in_backoff_since(key, exited.finished_at):
        message = (f"back-off {format_go_duration(backoff.get(key))} restarting failed "
                   f"container={container.name} pod={pod_desc(pod)}")
        klog.v(3).info("Back-off restarting failed container", err=message)
        return message
    backoff.next(key, exited.finished_at)
    return None


__all__ = [
    "CRASH_LOOP_BACK_OFF",
    "ContainerToKill",
    "KillReason",
    "PodActions",
    "ProbeResult",
    "ProbeResults",
    "SandboxDecision",
    "backoff_key",
    "check_restart_backoff",
    "compute_pod_actions",
    "container_changed",
    "format_go_duration",
    "is_host_network_pod",
    "is_init_container_failed",
    "is_restartable_init_container",
    "pod_desc",
    "pod_sandbox_changed",
    "restart_policy",
    "should_container_be_restarted",
    "should_restart_on_failure",
]
