"""Computing a pod's API status from what the runtime reports (upstream
``generateAPIPodStatus``, ``getPhase``, ``convertToAPIContainerStatuses`` and
``status/generate.go``).

The runtime knows container instances; users read ``pod.status``: a phase,
conditions and one status per container with waiting/running/terminated
state, the previous run, restart count and readiness. This module is the pure
translation between the two. It reads the previous status (to keep restart
counts, start time and condition transition times stable and to never leave a
terminal phase) and the reason cache (to explain why a container is waiting),
and it performs no I/O, so every rule here is unit-testable with hand-built
inputs.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1HostIP,
    V1Pod,
    V1PodCondition,
    V1PodIP,
    V1PodStatus,
)

from pykubelet.api import (
    POD_FAILED,
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    TERMINAL_POD_PHASES,
    clone,
    pod_ref,
    pod_uid,
)
from pykubelet.api.kubetypes import is_static_pod
from pykubelet.container import ContainerState, ContainerStatus, PodStatus
from pykubelet.container.helpers import (
    is_restartable_init_container,
    should_container_be_restarted,
)
from pykubelet.status.reason_cache import ReasonCache
from pykubelet.util import klog

# Waiting reasons of containers that have no instance yet.
CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
# Terminated reason of a container whose instance vanished from the runtime.
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"
# Exit code reported for a vanished container: it died, and "killed" is the likeliest cause.
UNKNOWN_EXIT_CODE = 137

POD_READY_TO_START_CONTAINERS = "PodReadyToStartContainers"
POD_INITIALIZED = "Initialized"
POD_READY = "Ready"
CONTAINERS_READY = "ContainersReady"
POD_SCHEDULED = "PodScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
# Conditions the kubelet computes itself; any other condition on the pod belongs to
# someone else (readiness-gate controllers, the scheduler, eviction) and is carried over.
KUBELET_CONDITIONS = frozenset({
    POD_READY_TO_START_CONTAINERS, POD_INITIALIZED, POD_READY, CONTAINERS_READY, POD_SCHEDULED,
    "PodResizePending", "PodResizeInProgress",
})

UNKNOWN_CONTAINER_STATUSES = "UnknownContainerStatuses"
POD_COMPLETED = "PodCompleted"
POD_FAILED_REASON = "PodFailed"
CONTAINERS_NOT_READY = "ContainersNotReady"
CONTAINERS_NOT_INITIALIZED = "ContainersNotInitialized"
READINESS_GATES_NOT_READY = "ReadinessGatesNotReady"


# Asked with a container id ("containerd://abc"): has its probe succeeded?
ProbeVerdict = Callable[[str], bool]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def generate_api_pod_status(
    pod: V1Pod,
    runtime_status: PodStatus,
    reasons: ReasonCache,
    *,
    host_ip: str,
    host_ips: list[str] | None = None,
    pod_is_terminal: bool = False,
    readiness: ProbeVerdict | None = None,
    startup: ProbeVerdict | None = None,
    previous: V1PodStatus | None = None,
    evicted: tuple[str, str] | None = None,
    now: Callable[[], datetime] = _utcnow,
) -> V1PodStatus:
    """The API status of ``pod`` given the runtime's view of it.

    ``previous`` is the last status the kubelet computed (the status manager's),
    falling back to ``pod.status``. ``readiness`` and ``startup`` answer, for a
    container id such as ``containerd://abc``, whether that container's probe
    has succeeded; they are asked only about running containers that declare
    such a probe. A running container without a readiness probe is ready; one
    with a probe is not ready until ``readiness`` says so. ``evicted`` is the
    (reason, message) of an internal module that wants the pod failed (upstream's
    ``PodSyncHandlers``, e.g. an exceeded ``activeDeadlineSeconds``): the phase
    becomes Failed with that reason and message, whatever the containers say.
    """
    spec = pod.spec
    api_status: V1PodStatus = pod.status or V1PodStatus()
    old: V1PodStatus = previous if previous is not None else api_status
    timestamp = now()
    has_init_containers = bool(spec.init_containers)

    status = V1PodStatus()
    pod_ips = sort_pod_ips(runtime_status.ips, host_ip)
    if not pod_ips and spec.host_network and host_ip:
        # Host-network pods share the node's addresses; the runtime reports none.
        pod_ips = [host_ip, *[ip for ip in host_ips or [] if ip != host_ip]][:2]
    if pod_ips:
        status.pod_ip = pod_ips[0]
        status.pod_ips = [V1PodIP(ip=ip) for ip in pod_ips]
    if host_ip:
        status.host_ip = host_ip
        status.host_ips = [V1HostIP(ip=ip) for ip in (host_ips or [host_ip])]
    status.qos_class = _pod_qos(pod)

    status.container_statuses = _convert_container_statuses(
        pod, runtime_status, reasons, old.container_statuses, spec.containers or [],
        has_init_containers=has_init_containers, is_init=False)
    status.init_container_statuses = _convert_container_statuses(
        pod, runtime_status, reasons, old.init_container_statuses, spec.init_containers or [],
        has_init_containers=has_init_containers, is_init=True)
    _apply_probe_results(pod, status, readiness, startup)

    phase = get_phase(pod, status.container_statuses, status.init_container_statuses,
                      pod_is_terminal)
    if phase not in TERMINAL_POD_PHASES:
        # Once any view (ours or the API's) says terminal, the pod stays terminal.
        if old.phase in TERMINAL_POD_PHASES:
            phase = old.phase
        elif api_status.phase in TERMINAL_POD_PHASES:
            phase = api_status.phase
    if api_status.phase in TERMINAL_POD_PHASES and phase != api_status.phase:
        klog.error("Pod attempted illegal phase transition", pod=pod_ref(pod),
                   originalStatusPhase=api_status.phase, apiStatusPhase=phase)
        phase = api_status.phase
    if phase == old.phase:
        # Reason and message describe the phase (e.g. Evicted), so they live as long as it.
        status.reason = old.reason or api_status.reason
        status.message = old.message or api_status.message
    if evicted is not None:
        # The eviction's reason and message replace the phase's; a terminal phase the
        # API already holds still stands (no phase leaves Succeeded or Failed).
        status.reason, status.message = evicted
        if api_status.phase not in TERMINAL_POD_PHASES:
            phase = POD_FAILED
    status.phase = phase

    conditions = [clone(c) for c in api_status.conditions or []
                  if c.type not in KUBELET_CONDITIONS]
    disruption = _find_condition(old.conditions, DISRUPTION_TARGET)
    if disruption is not None:
        conditions = [c for c in conditions if c.type != DISRUPTION_TARGET]
        conditions.append(clone(disruption))
    all_statuses = [*status.init_container_statuses, *status.container_statuses]
    generated = [
        generate_pod_ready_to_start_containers_condition(pod, runtime_status),
        generate_pod_initialized_condition(pod, all_statuses, phase),
    ]
    generated.append(generate_pod_ready_condition(pod, [*conditions, *generated], all_statuses,
                                                  phase))
    generated.append(generate_containers_ready_condition(pod, all_statuses, phase))
    generated.append(V1PodCondition(type=POD_SCHEDULED, status="True"))
    for condition in generated:
        stamp_transition_time(condition, old.conditions, timestamp)
    status.conditions = [*conditions, *generated]

    status.start_time = old.start_time or api_status.start_time or timestamp
    return status


def get_phase(pod: V1Pod, container_statuses: Sequence[V1ContainerStatus],
              init_statuses: Sequence[V1ContainerStatus], pod_is_terminal: bool) -> str:
    """The pod phase implied by its container statuses and restart policy (upstream getPhase)."""
    spec = pod.spec
    restart_policy = spec.restart_policy or "Always"
    init_by_name = {s.name: s for s in init_statuses}
    app_by_name = {s.name: s for s in container_statuses}
    init_containers: list[V1Container] = spec.init_containers or []

    pending_regular_init = 0
    pending_sidecars = 0
    failed_init = 0
    for container in init_containers:
        if is_restartable_init_container(container):
            continue
        init_status = init_by_name.get(container.name)
        state = init_status.state if init_status is not None else None
        if init_status is None or state is None or state.running is not None:
            pending_regular_init += 1
        elif state.terminated is not None:
            if state.terminated.exit_code != 0:
                failed_init += 1
        elif state.waiting is not None:
            last = _last_terminated(init_status)
            if last is None:
                pending_regular_init += 1
            elif last.exit_code != 0:
                failed_init += 1
        else:
            pending_regular_init += 1

    unknown = running = waiting = stopped = succeeded = 0
    for container in init_containers:
        if not is_restartable_init_container(container):
            continue
        sidecar = init_by_name.get(container.name)
        state = sidecar.state if sidecar is not None else None
        if sidecar is None:
            unknown += 1
        elif state is not None and state.running is not None:
            if not sidecar.started:
                pending_sidecars += 1
            running += 1
        elif state is not None and state.terminated is not None:
            # A stopped sidecar is restarted regardless of policy: it does not decide the phase.
            pass
        elif state is not None and state.waiting is not None:
            if _last_terminated(sidecar) is None:
                pending_sidecars += 1
                waiting += 1
        else:
            pending_sidecars += 1
            unknown += 1

    for container in spec.containers or []:
        app = app_by_name.get(container.name)
        state = app.state if app is not None else None
        if app is None or state is None:
            unknown += 1
        elif state.running is not None:
            running += 1
        elif state.terminated is not None:
            stopped += 1
            if state.terminated.exit_code == 0:
                succeeded += 1
        elif state.waiting is not None:
            if _last_terminated(app) is not None:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1

    if failed_init > 0 and restart_policy == "Never":
        return POD_FAILED
    # Restarting sidecars must not send an initialised pod back to Pending.
    initialized = has_any_regular_container_started(pod, container_statuses)
    if pending_regular_init > 0 or (pending_sidecars > 0 and not initialized) or waiting > 0:
        return POD_PENDING
    if running > 0 and unknown == 0:
        return POD_RUNNING
    if running == 0 and stopped > 0 and unknown == 0:
        if pod_is_terminal and not is_static_pod(pod):
            return POD_SUCCEEDED if stopped == succeeded else POD_FAILED
        if restart_policy == "Always":
            return POD_RUNNING
        if stopped == succeeded:
            return POD_SUCCEEDED
        if restart_policy == "Never":
            return POD_FAILED
        return POD_RUNNING
    return POD_PENDING


def generate_containers_ready_condition(pod: V1Pod, statuses: Sequence[V1ContainerStatus],
                                        phase: str) -> V1PodCondition:
    """ContainersReady: every app container and sidecar reports ready."""
    by_name = {s.name: s for s in statuses}
    unknown: list[str] = []
    unready: list[str] = []
    watched = [c for c in pod.spec.init_containers or [] if is_restartable_init_container(c)]
    watched.extend(pod.spec.containers or [])
    for container in watched:
        container_status = by_name.get(container.name)
        if container_status is None:
            unknown.append(container.name)
        elif not container_status.ready:
            unready.append(container.name)

    if (phase == POD_SUCCEEDED and not unknown) or phase == POD_FAILED:
        return V1PodCondition(type=CONTAINERS_READY, status="False",
                              reason=POD_COMPLETED if phase == POD_SUCCEEDED else POD_FAILED_REASON)
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_go_list(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {_go_list(unready)}")
    if messages:
        return V1PodCondition(type=CONTAINERS_READY, status="False", reason=CONTAINERS_NOT_READY,
                              message=", ".join(messages))
    return V1PodCondition(type=CONTAINERS_READY, status="True")


def generate_pod_ready_condition(pod: V1Pod, conditions: Sequence[V1PodCondition],
                                 statuses: Sequence[V1ContainerStatus],
                                 phase: str) -> V1PodCondition:
    """Ready: containers ready and every readiness gate's condition True."""
    containers_ready = generate_containers_ready_condition(pod, statuses, phase)
    if containers_ready.status != "True":
        return V1PodCondition(type=POD_READY, status=containers_ready.status,
                              reason=containers_ready.reason, message=containers_ready.message)
    messages = []
    for gate in pod.spec.readiness_gates or []:
        gate_condition = _find_condition(conditions, gate.condition_type)
        if gate_condition is None:
            messages.append(f'corresponding condition of pod readiness gate '
                            f'"{gate.condition_type}" does not exist.')
        elif gate_condition.status != "True":
            messages.append(f'the status of pod readiness gate "{gate.condition_type}" is not '
                            f'"True", but {gate_condition.status}')
    if messages:
        return V1PodCondition(type=POD_READY, status="False", reason=READINESS_GATES_NOT_READY,
                              message=", ".join(messages))
    return V1PodCondition(type=POD_READY, status="True")


def generate_pod_initialized_condition(pod: V1Pod, statuses: Sequence[V1ContainerStatus],
                                       phase: str) -> V1PodCondition:
    """Initialized: every init container completed (sidecars: started)."""
    by_name = {s.name: s for s in statuses}
    unknown: list[str] = []
    incomplete: list[str] = []
    for container in pod.spec.init_containers or []:
        container_status = by_name.get(container.name)
        if container_status is None:
            unknown.append(container.name)
        elif not _init_container_done(container, container_status):
            incomplete.append(container.name)

    if phase == POD_SUCCEEDED and not unknown:
        return V1PodCondition(type=POD_INITIALIZED, status="True", reason=POD_COMPLETED)
    # An app container that ever ran proves initialisation finished, even while a
    # sidecar restarts.
    if has_any_regular_container_started(pod, statuses):
        return V1PodCondition(type=POD_INITIALIZED, status="True")
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_go_list(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {_go_list(incomplete)}")
    if messages:
        return V1PodCondition(type=POD_INITIALIZED, status="False",
                              reason=CONTAINERS_NOT_INITIALIZED, message=", ".join(messages))
    return V1PodCondition(type=POD_INITIALIZED, status="True")


def generate_pod_ready_to_start_containers_condition(pod: V1Pod,
                                                     runtime_status: PodStatus) -> V1PodCondition:
    """PodReadyToStartContainers: a usable sandbox with networking exists."""
    ready = not needs_new_sandbox(pod, runtime_status)
    return V1PodCondition(type=POD_READY_TO_START_CONTAINERS, status="True" if ready else "False")


def needs_new_sandbox(pod: V1Pod, runtime_status: PodStatus) -> bool:
    """Whether the pod lacks a single ready sandbox in the right network namespace with an IP."""
    sandboxes = runtime_status.sandbox_statuses
    if not sandboxes:
        return True
    ready_count = sum(1 for s in sandboxes if s.state == api_pb2.SANDBOX_READY)
    latest = sandboxes[0]
    if ready_count > 1 or latest.state != api_pb2.SANDBOX_READY:
        return True
    host_network = bool(pod.spec.host_network)
    wanted_mode = api_pb2.NODE if host_network else api_pb2.POD
    if latest.linux.namespaces.options.network != wanted_mode:
        return True
    return not host_network and latest.HasField("network") and not latest.network.ip


def stamp_transition_time(condition: V1PodCondition,
                          previous: Sequence[V1PodCondition] | None, now: datetime) -> None:
    """Keep the previous transition time while the condition's status is unchanged."""
    before = _find_condition(previous, condition.type)
    if before is not None and before.status == condition.status and before.last_transition_time:
        condition.last_transition_time = before.last_transition_time
    else:
        condition.last_transition_time = now


def sort_pod_ips(ips: Sequence[str], host_ip: str = "") -> list[str]:
    """At most one IP per family, the node's own family first (upstream sortPodIPs)."""
    parsed = []
    for text in ips:
        try:
            parsed.append(ipaddress.ip_address(text.strip()))
        except ValueError:
            klog.v(4).info("Ignoring unparsable pod IP", ip=text)
    primary = 4
    if host_ip:
        with contextlib.suppress(ValueError):
            primary = ipaddress.ip_address(host_ip).version
    result = []
    for version in (primary, 6 if primary == 4 else 4):
        match = next((ip for ip in parsed if ip.version == version), None)
        if match is not None:
            result.append(str(match))
    return result




def has_any_regular_container_started(pod: V1Pod,
                                      statuses: Sequence[V1ContainerStatus]) -> bool:
    names = {c.name for c in pod.spec.containers or []}
    for container_status in statuses:
        state = container_status.state
        if container_status.name in names and state is not None and (
                state.running is not None or state.terminated is not None):
            return True
    return False


def _init_container_done(container: V1Container, container_status: V1ContainerStatus) -> bool:
    if is_restartable_init_container(container):
        return bool(container_status.started)
    return bool(container_status.ready)


def _convert_container_statuses(
    pod: V1Pod,
    runtime_status: PodStatus,
    reasons: ReasonCache,
    previous: Sequence[V1ContainerStatus] | None,
    containers: Sequence[V1Container],
    *,
    has_init_containers: bool,
    is_init: bool,
) -> list[V1ContainerStatus]:
    old_by_name = {s.name: s for s in previous or []}
    default_reason = POD_INITIALIZING if has_init_containers else CONTAINER_CREATING
    deleting = pod.metadata is not None and pod.metadata.deletion_timestamp is not None

    statuses: dict[str, V1ContainerStatus] = {}
    for container in containers:
        old = old_by_name.get(container.name)
        if old is not None and old.state is not None and old.state.terminated is not None:
            statuses[container.name] = clone(old)
            continue
        fresh = V1ContainerStatus(
            name=container.name, image=container.image or "", image_id="", ready=False,
            restart_count=0,
            state=V1ContainerState(waiting=V1ContainerStateWaiting(reason=default_reason)))
        if old is not None:
            fresh.restart_count = old.restart_count or 0
            fresh.last_state = clone(old.last_state)
        statuses[container.name] = fresh

    for container in containers:
        if runtime_status.find_container_status(container.name) is not None:
            continue
        old = old_by_name.get(container.name)
        if old is None or old.state is None or old.state.running is None:
            continue
        current = statuses[container.name]
        waiting = current.state.waiting if current.state is not None else None
        if waiting is None or waiting.reason != default_reason or _last_terminated(current):
            continue
        # It ran and vanished without a trace: say it terminated, so the pod does
        # not fall back to Pending as if it had never started.
        current.last_state = V1ContainerState(terminated=V1ContainerStateTerminated(
            reason=CONTAINER_STATUS_UNKNOWN, exit_code=UNKNOWN_EXIT_CODE,
            message="The container could not be located when the pod was deleted.  "
                    "The container used to be Running"))
        if not deleting:
            current.restart_count = (current.restart_count or 0) + 1

    images = {c.name: c.image or "" for c in containers}
    instances = sorted(runtime_status.container_statuses, key=lambda s: s.created_at,
                       reverse=True)
    seen: dict[str, int] = {}
    for instance in instances:
        if instance.name not in statuses or seen.get(instance.name, 0) >= 2:
            continue
        converted = _convert_instance(instance, old_by_name.get(instance.name),
                                      images[instance.name])
        if seen.get(instance.name, 0) == 0:
            statuses[instance.name] = converted
        else:
            statuses[instance.name].last_state = converted.state
        seen[instance.name] = seen.get(instance.name, 0) + 1

    for container in containers:
        newest = runtime_status.find_container_status(container.name)
        current = statuses[container.name]
        if is_init:
            if newest is not None and newest.state == ContainerState.EXITED \
                    and newest.exit_code == 0:
                continue
            if (newest is None and not is_restartable_init_container(container)
                    and _any_regular_container_created(pod, runtime_status)
                    and current.state is not None and current.state.waiting is not None):
                # Its instance was garbage collected, but app containers exist, so it succeeded.
                current.state = V1ContainerState(terminated=V1ContainerStateTerminated(
                    exit_code=0, reason="Completed",
                    message="Unable to get init container status from container runtime and "
                            "pod has been initialized, treat it as exited normally"))
                continue
        if not should_container_be_restarted(container, pod, runtime_status):
            continue
        info = reasons.get(pod_uid(pod), container.name)
        if info is None:
            continue
        if current.state is not None and current.state.terminated is not None:
            current.last_state = current.state
        current.state = V1ContainerState(
            waiting=V1ContainerStateWaiting(reason=info.reason, message=info.message or None))

    if is_init:
        return [statuses[c.name] for c in containers]
    return [statuses[name] for name in sorted(statuses)]


def _convert_instance(instance: ContainerStatus, old: V1ContainerStatus | None,
                      spec_image: str) -> V1ContainerStatus:
    container_id = str(instance.id)
    converted = V1ContainerStatus(
        name=instance.name, image=spec_image or instance.image, image_id=instance.image_ref,
        container_id=container_id, restart_count=instance.restart_count, ready=False)
    if instance.state == ContainerState.RUNNING:
        converted.state = V1ContainerState(
            running=V1ContainerStateRunning(started_at=_from_unix(instance.started_at)))
    elif instance.state == ContainerState.EXITED:
        converted.state = V1ContainerState(terminated=V1ContainerStateTerminated(
            exit_code=instance.exit_code,
            reason=instance.reason or ("Completed" if instance.exit_code == 0 else "Error"),
            message=instance.message or None,
            started_at=_from_unix(instance.started_at),
            finished_at=_from_unix(instance.finished_at),
            container_id=container_id))
    elif (instance.state == ContainerState.UNKNOWN and old is not None
          and old.state is not None and old.state.running is not None):
        # It was running and the runtime lost track of it: it did run, so
        # reporting it as waiting could make run-once pods run twice.
        converted.state = V1ContainerState(terminated=V1ContainerStateTerminated(
            reason=CONTAINER_STATUS_UNKNOWN, exit_code=UNKNOWN_EXIT_CODE,
            message="The container could not be located when the pod was terminated"))
        converted.restart_count = (old.restart_count or 0) + 1
    else:
        converted.state = V1ContainerState(waiting=V1ContainerStateWaiting())
    return converted


def _apply_probe_results(pod: V1Pod, status: V1PodStatus, readiness: ProbeVerdict | None,
                         startup: ProbeVerdict | None) -> None:
    app_specs = {c.name: c for c in pod.spec.containers or []}
    for app in status.container_statuses:
        spec = app_specs[app.name]
        app.started = _started(spec, app, startup)
        app.ready = app.started and _ready(spec, app, readiness)
    init_specs = {c.name: c for c in pod.spec.init_containers or []}
    for init in status.init_container_statuses:
        spec = init_specs[init.name]
        init.started = _started(spec, init, startup)
        if is_restartable_init_container(spec):
            init.ready = init.started and _ready(spec, init, readiness)
        else:
            terminated = init.state.terminated if init.state is not None else None
            init.ready = terminated is not None and terminated.exit_code == 0


def _started(spec: V1Container, container_status: V1ContainerStatus,
             startup: ProbeVerdict | None) -> bool:
    if container_status.state is None or container_status.state.running is None:
        return False
    if spec.startup_probe is None:
        return True
    return startup is not None and startup(container_status.container_id or "")


def _ready(spec: V1Container, container_status: V1ContainerStatus,
           readiness: ProbeVerdict | None) -> bool:
    if container_status.state is None or container_status.state.running is None:
        return False
    if spec.readiness_probe is None:
        return True
    return readiness is not None and readiness(container_status.container_id or "")


def _any_regular_container_created(pod: V1Pod, runtime_status: PodStatus) -> bool:
    for container in pod.spec.containers or []:
        newest = runtime_status.find_container_status(container.name)
        if newest is not None and newest.state != ContainerState.UNKNOWN:
            return True
    return False


def _last_terminated(container_status: V1ContainerStatus) -> V1ContainerStateTerminated | None:
    last = container_status.last_state
    return last.terminated if last is not None else None


def _find_condition(conditions: Sequence[V1PodCondition] | None,
                    condition_type: str) -> V1PodCondition | None:
    return next((c for c in conditions or [] if c.type == condition_type), None)


def _go_list(names: Sequence[str]) -> str:
    # Upstream formats name lists as Go prints a []string; clients match on it.
    return "[" + " ".join(names) + "]"


def _from_unix(seconds: float) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds > 0 else None


def _pod_qos(pod: V1Pod) -> str:
    # Imported here: the QoS module is another subsystem's and only this call needs it.
    from pykubelet.api.qos import get_pod_qos

    return get_pod_qos(pod)


