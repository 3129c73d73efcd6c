"""Pod status generation: what ``kubectl get pod -o yaml`` shows for runtime situations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Pod, V1PodCondition, V1PodStatus

from pykubelet.api import pod_from_dict
from pykubelet.container import (
    START_CONTAINER,
    ContainerID,
    ContainerState,
    ContainerStatus,
    PodStatus,
    PodSyncResult,
    SyncResult,
)
from pykubelet.status.generate import generate_api_pod_status, get_phase
from pykubelet.status.reason_cache import ReasonCache

UID = "8d9a3c4e-0000-4000-8000-000000000001"
T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
STARTED = T0.timestamp() - 30
FINISHED = T0.timestamp() - 10


def make_pod(containers: Sequence[str | dict[str, Any]] = ("app",), *,
             init: Sequence[str | dict[str, Any]] = (), restart_policy: str = "Always",
             **spec: Any) -> V1Pod:
    def container(entry: str | dict[str, Any]) -> dict[str, Any]:
        if isinstance(entry, str):
            return {"name": entry, "image": f"registry.local/{entry}:1"}
        return {"image": f"registry.local/{entry['name']}:1", **entry}

    body: dict[str, Any] = {"restartPolicy": restart_policy,
                            "containers": [container(c) for c in containers], **spec}
    if init:
        body["initContainers"] = [container(c) for c in init]
    return pod_from_dict({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "web", "namespace": "default", "uid": UID},
                          "spec": body})


def instance(name: str, state: ContainerState, *, exit_code: int = 0, restarts: int = 0,
             created: float = 100.0, reason: str = "", message: str = "") -> ContainerStatus:
    return ContainerStatus(
        id=ContainerID("containerd", f"{name}-{restarts}"), name=name, state=state,
        created_at=created, started_at=STARTED if state != ContainerState.CREATED else 0.0,
        finished_at=FINISHED if state == ContainerState.EXITED else 0.0, exit_code=exit_code,
        image=f"registry.local/{name}:1", image_ref=f"sha256:{name}digest",
        restart_count=restarts, reason=reason, message=message)


def sandbox(ready: bool = True, ip: str = "10.88.0.5") -> api_pb2.PodSandboxStatus:
    status = api_pb2.PodSandboxStatus(
        id="sandbox-1",
        state=api_pb2.SANDBOX_READY if ready else api_pb2.SANDBOX_NOTREADY)
    status.network.ip = ip
    return status


def runtime(*instances: ContainerStatus, ips: Sequence[str] = ("10.88.0.5",),
            sandboxes: Sequence[api_pb2.PodSandboxStatus] | None = None) -> PodStatus:
    return PodStatus(id=UID, name="web", namespace="default", ips=list(ips),
                     container_statuses=list(instances),
                     sandbox_statuses=list(sandboxes if sandboxes is not None else [sandbox()]))


def generate(pod: V1Pod, runtime_status: PodStatus, reasons: ReasonCache | None = None,
             now: datetime = T0, **kwargs: Any) -> V1PodStatus:
    return generate_api_pod_status(pod, runtime_status, reasons or ReasonCache(),
                                   host_ip="192.168.1.10", now=lambda: now, **kwargs)


def condition(status: V1PodStatus, condition_type: str) -> V1PodCondition:
    matches = [c for c in status.conditions if c.type == condition_type]
    assert len(matches) == 1, f"expected exactly one {condition_type} condition"
    return matches[0]


def container(status: V1PodStatus, name: str, init: bool = False) -> Any:
    statuses = status.init_container_statuses if init else status.container_statuses
    return next(s for s in statuses if s.name == name)


def start_failure(container_name: str, reason: str, message: str) -> ReasonCache:
    cache = ReasonCache()
    result = PodSyncResult()
    result.add(SyncResult(START_CONTAINER, container_name)).fail(
        RuntimeError(message), reason, message)
    cache.update(UID, result)
    return cache


def test_new_pod_without_instances_is_pending_with_container_creating() -> None:
    status = generate(make_pod(), runtime(sandboxes=[], ips=()))

    assert status.phase == "Pending"
    app = container(status, "app")
    assert app.state.waiting.reason == "ContainerCreating"
    assert app.image == "registry.local/app:1"
    assert app.ready is False and app.restart_count == 0 and app.container_id is None
    assert condition(status, "PodReadyToStartContainers").status == "False"
    ready = condition(status, "Ready")
    assert (ready.status, ready.reason) == ("False", "ContainersNotReady")
    assert ready.message == "containers with unready status: [app]"
    assert condition(status, "PodScheduled").status == "True"
    assert status.pod_ip is None
    assert status.start_time == T0


def test_app_containers_wait_with_pod_initializing_while_init_runs() -> None:
    pod = make_pod(["app"], init=["setup"])
    status = generate(pod, runtime(instance("setup", ContainerState.RUNNING)))

    assert status.phase == "Pending"
    assert container(status, "app").state.waiting.reason == "PodInitializing"
    setup = container(status, "setup", init=True)
    assert setup.state.running.started_at == datetime.fromtimestamp(STARTED, UTC)
    assert setup.ready is False
    initialized = condition(status, "Initialized")
    assert (initialized.status, initialized.reason) == ("False", "ContainersNotInitialized")
    assert initialized.message == "containers with incomplete status: [setup]"
    assert condition(status, "PodReadyToStartContainers").status == "True"


def test_two_running_containers_make_a_ready_running_pod() -> None:
    pod = make_pod(["web", "sidecar-log"])
    status = generate(pod, runtime(instance("web", ContainerState.RUNNING),
                                   instance("sidecar-log", ContainerState.RUNNING)))

    assert status.phase == "Running"
    assert [s.name for s in status.container_statuses] == ["sidecar-log", "web"]
    web = container(status, "web")
    assert web.ready is True and web.started is True
    assert web.container_id == "containerd://web-0"
    assert web.image_id == "sha256:webdigest"
    assert web.state.running.started_at == datetime.fromtimestamp(STARTED, UTC)
    for kind in ("Ready", "ContainersReady", "Initialized", "PodReadyToStartContainers"):
        assert condition(status, kind).status == "True", kind


def test_never_policy_exit_zero_is_succeeded_with_completed() -> None:
    status = generate(make_pod(restart_policy="Never"),
                      runtime(instance("app", ContainerState.EXITED, reason="Completed")))

    assert status.phase == "Succeeded"
    terminated = container(status, "app").state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert terminated.finished_at == datetime.fromtimestamp(FINISHED, UTC)
    assert terminated.container_id == "containerd://app-0"
    assert condition(status, "ContainersReady").reason == "PodCompleted"


def test_never_policy_non_zero_exit_is_failed_with_error() -> None:
    status = generate(make_pod(restart_policy="Never"),
                      runtime(instance("app", ContainerState.EXITED, exit_code=1)))

    assert status.phase == "Failed"
    terminated = container(status, "app").state.terminated
    assert (terminated.exit_code, terminated.reason) == (1, "Error")
    assert condition(status, "Ready").reason == "PodFailed"


def test_on_failure_restart_keeps_running_with_previous_run_as_last_state() -> None:
    pod = make_pod(restart_policy="OnFailure")
    status = generate(pod, runtime(
        instance("app", ContainerState.RUNNING, restarts=1, created=200.0),
        instance("app", ContainerState.EXITED, exit_code=1, restarts=0, created=100.0)))

    assert status.phase == "Running"
    app = container(status, "app")
    assert app.restart_count == 1
    assert app.state.running is not None
    assert app.last_state.terminated.exit_code == 1
    assert app.last_state.terminated.container_id == "containerd://app-0"


def test_on_failure_failed_container_awaiting_restart_is_still_running() -> None:
    status = generate(make_pod(restart_policy="OnFailure"),
                      runtime(instance("app", ContainerState.EXITED, exit_code=1)))
    assert status.phase == "Running"


def test_always_policy_exit_zero_stays_running() -> None:
    status = generate(make_pod(restart_policy="Always"),
                      runtime(instance("app", ContainerState.EXITED, exit_code=0)))
    assert status.phase == "Running"


def test_crash_loop_back_off_shows_waiting_reason_and_last_run() -> None:
    reasons = start_failure("app", "CrashLoopBackOff",
                            "back-off 40s restarting failed container=app pod=web_default")
    status = generate(make_pod(), runtime(
        instance("app", ContainerState.EXITED, exit_code=2, restarts=3)), reasons)

    app = container(status, "app")
    assert app.state.waiting.reason == "CrashLoopBackOff"
    assert app.state.waiting.message.startswith("back-off 40s")
    assert app.last_state.terminated.exit_code == 2
    assert app.restart_count == 3
    assert status.phase == "Running"


def test_successful_start_clears_the_waiting_reason() -> None:
    reasons = start_failure("app", "CrashLoopBackOff", "back-off 10s")
    success = PodSyncResult()
    success.add(SyncResult(START_CONTAINER, "app"))
    reasons.update(UID, success)

    status = generate(make_pod(), runtime(
        instance("app", ContainerState.EXITED, exit_code=2, restarts=1)), reasons)
    assert container(status, "app").state.terminated.exit_code == 2


def test_image_pull_failure_shows_err_image_pull() -> None:
    reasons = start_failure("app", "ErrImagePull", 'failed to pull image "registry.local/app:1"')
    status = generate(make_pod(), runtime(), reasons)

    waiting = container(status, "app").state.waiting
    assert (waiting.reason, waiting.message) == (
        "ErrImagePull", 'failed to pull image "registry.local/app:1"')
    assert status.phase == "Pending"


def test_failed_init_container_with_never_fails_the_pod_uninitialized() -> None:
    pod = make_pod(["app"], init=["migrate"], restart_policy="Never")
    status = generate(pod, runtime(instance("migrate", ContainerState.EXITED, exit_code=3)))

    assert status.phase == "Failed"
    assert container(status, "migrate", init=True).state.terminated.reason == "Error"
    assert container(status, "app").state.waiting.reason == "PodInitializing"
    initialized = condition(status, "Initialized")
    assert (initialized.status, initialized.message) == (
        "False", "containers with incomplete status: [migrate]")


def test_completed_init_container_lets_the_pod_initialize() -> None:
    pod = make_pod(["app"], init=["migrate"])
    status = generate(pod, runtime(
        instance("migrate", ContainerState.EXITED, created=100.0),
        instance("app", ContainerState.RUNNING, created=200.0)))

    assert status.phase == "Running"
    assert container(status, "migrate", init=True).ready is True
    assert condition(status, "Initialized").status == "True"


def test_running_sidecar_and_app_make_running_pod_and_sidecar_counts_for_readiness() -> None:
    pod = make_pod(["app"], init=[{"name": "proxy", "restartPolicy": "Always",
                                   "readinessProbe": {"tcpSocket": {"port": 15000}}}])
    sidecar_ready: dict[str, bool] = {"containerd://proxy-0": False}
    rt = runtime(instance("proxy", ContainerState.RUNNING, created=100.0),
                 instance("app", ContainerState.RUNNING, created=200.0))

    status = generate(pod, rt, readiness=lambda cid: sidecar_ready.get(cid, False))
    assert status.phase == "Running"
    proxy = container(status, "proxy", init=True)
    assert (proxy.started, proxy.ready) == (True, False)
    containers_ready = condition(status, "ContainersReady")
    assert containers_ready.message == "containers with unready status: [proxy]"

    sidecar_ready["containerd://proxy-0"] = True
    status = generate(pod, rt, readiness=lambda cid: sidecar_ready.get(cid, False))
    assert container(status, "proxy", init=True).ready is True
    assert condition(status, "Ready").status == "True"


def test_container_with_readiness_probe_is_unready_until_probe_succeeds() -> None:
    pod = make_pod([{"name": "app", "readinessProbe": {"httpGet": {"path": "/", "port": 80}}}])
    rt = runtime(instance("app", ContainerState.RUNNING))

    assert container(generate(pod, rt), "app").ready is False
    assert container(generate(pod, rt, readiness=lambda cid: cid == "containerd://app-0"),
                     "app").ready is True


def test_condition_transition_times_survive_unchanged_statuses() -> None:
    pod = make_pod(restart_policy="Always")
    first = generate(pod, runtime(instance("app", ContainerState.CREATED)), now=T0)
    later = T0 + timedelta(minutes=5)
    second = generate(pod, runtime(instance("app", ContainerState.RUNNING)),
                      previous=first, now=later)

    assert condition(second, "PodScheduled").last_transition_time == T0
    assert condition(second, "PodReadyToStartContainers").last_transition_time == T0
    assert condition(second, "Ready").status == "True"
    assert condition(second, "Ready").last_transition_time == later
    assert second.start_time == T0


def test_terminal_phase_from_previous_status_is_kept() -> None:
    pod = make_pod(restart_policy="Never")
    done = generate(pod, runtime(instance("app", ContainerState.EXITED)))
    assert done.phase == "Succeeded"

    # The runtime garbage collected the container; the pod must not look pending again.
    after_gc = generate(pod, runtime(sandboxes=[], ips=()), previous=done)
    assert after_gc.phase == "Succeeded"


def test_pod_ips_order_follows_node_family_and_qos_is_reported() -> None:
    pod = make_pod([{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                  "limits": {"cpu": "100m", "memory": "64Mi"}}}])
    status = generate(pod, runtime(instance("app", ContainerState.RUNNING),
                                   ips=["fd00:10::5", "10.88.0.5"]),
                      host_ips=["192.168.1.10", "fd00::10"])

    assert status.pod_ip == "10.88.0.5"
    assert [ip.ip for ip in status.pod_ips] == ["10.88.0.5", "fd00:10::5"]
    assert status.host_ip == "192.168.1.10"
    assert [ip.ip for ip in status.host_ips] == ["192.168.1.10", "fd00::10"]
    assert status.qos_class == "Guaranteed"
    assert generate(make_pod(), runtime()).qos_class == "BestEffort"


def test_host_network_pod_reports_the_node_address() -> None:
    pod = make_pod(hostNetwork=True)
    status = generate(pod, runtime(instance("app", ContainerState.RUNNING), ips=()))
    assert status.pod_ip == "192.168.1.10"


def test_readiness_gate_without_its_condition_keeps_pod_unready() -> None:
    pod = make_pod(readinessGates=[{"conditionType": "example.com/lb-ready"}])
    rt = runtime(instance("app", ContainerState.RUNNING))

    ready = condition(generate(pod, rt), "Ready")
    assert (ready.status, ready.reason) == ("False", "ReadinessGatesNotReady")
    assert '"example.com/lb-ready" does not exist' in ready.message

    pod.status = V1PodStatus(conditions=[V1PodCondition(type="example.com/lb-ready",
                                                        status="True")])
    gated = generate(pod, rt)
    assert condition(gated, "Ready").status == "True"
    assert condition(gated, "example.com/lb-ready").status == "True"


def test_get_phase_keeps_pending_while_regular_init_container_runs() -> None:
    pod = make_pod(["app"], init=["setup"])
    status = generate(pod, runtime(instance("setup", ContainerState.RUNNING)))
    assert get_phase(pod, status.container_statuses, status.init_container_statuses,
                     pod_is_terminal=False) == "Pending"
    # A terminal pod whose containers all succeeded is Succeeded even under Always.
    done = generate(make_pod(), runtime(instance("app", ContainerState.EXITED)))
    assert get_phase(make_pod(), done.container_statuses, [], pod_is_terminal=True) == "Succeeded"


def test_init_containers_rerunning_after_sandbox_restart_make_the_pod_pending() -> None:
    pod = make_pod(["app"], init=["setup"])
    # The app ran in the previous sandbox; the new sandbox starts with init again.
    status = generate(pod, runtime(instance("setup", ContainerState.RUNNING, created=300.0),
                                   instance("app", ContainerState.EXITED, created=100.0)))
    assert container(status, "app").state.terminated is not None
    assert status.phase == "Pending"


def test_unstarted_sidecar_holds_pending_only_before_the_app_ever_ran() -> None:
    pod = make_pod(["app"], init=[{"name": "proxy", "restartPolicy": "Always",
                                   "startupProbe": {"tcpSocket": {"port": 15000}}}])
    proxy = instance("proxy", ContainerState.RUNNING, created=100.0)

    starting = generate(pod, runtime(proxy), startup=lambda cid: False)
    assert container(starting, "proxy", init=True).started is False
    assert starting.phase == "Pending"

    # Later the sidecar restarts and is not started yet, but the app already runs.
    app = instance("app", ContainerState.RUNNING, created=200.0)
    restarted = generate(pod, runtime(proxy, app), startup=lambda cid: False)
    assert restarted.phase == "Running"
    assert condition(restarted, "Initialized").status == "True"
