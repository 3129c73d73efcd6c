"""compute_pod_actions, CrashLoopBackOff, grace periods and restart counts, without a runtime.

Each case is a situation a user meets (a container exited, a spec edit, an init
container failed, a sidecar crashed) and checks what the next sync would do.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Pod, V1Probe

from pykubelet.api import pod_from_dict
from pykubelet.container import ContainerID, ContainerState, ContainerStatus, PodStatus, ProbeResult
from pykubelet.kuberuntime.actions import (
    KillReason,
    backoff_key,
    check_restart_backoff,
    compute_pod_actions,
    format_go_duration,
)
from pykubelet.kuberuntime.container import restart_count_from_log_dir, termination_grace_period
from pykubelet.kuberuntime.hash import hash_container
from pykubelet.util.backoff import Backoff

UID = "uid-1"


def make_pod(containers: list[str], init: list[str] | None = None,
             sidecars: set[str] | None = None, restart_policy: str = "Always",
             host_network: bool = False) -> V1Pod:
    sidecars = sidecars or set()
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "hostNetwork": host_network,
        "containers": [{"name": n, "image": "busybox", "command": ["sh", "-c", "true"]}
                       for n in containers],
    }
    if init:
        spec["initContainers"] = [
            {"name": n, "image": "busybox",
             **({"restartPolicy": "Always"} if n in sidecars else {})}
            for n in init]
    return pod_from_dict({"metadata": {"name": "web", "namespace": "default", "uid": UID},
                          "spec": spec})


def spec_of(pod: V1Pod, name: str) -> Any:
    for c in [*(pod.spec.init_containers or []), *pod.spec.containers]:
        if c.name == name:
            return c
    raise KeyError(name)


def sandbox(state: int = api_pb2.SANDBOX_READY, attempt: int = 0, sid: str = "sb1",
            host_network: bool = False, ip: str = "10.88.0.5") -> api_pb2.PodSandboxStatus:
    status = api_pb2.PodSandboxStatus(
        id=sid, state=state,
        metadata=api_pb2.PodSandboxMetadata(name="web", namespace="default", uid=UID,
                                            attempt=attempt))
    status.linux.namespaces.options.network = api_pb2.NODE if host_network else api_pb2.POD
    if not host_network:
        status.network.ip = ip
    return status


class StatusBuilder:
    """Container statuses for a pod, newest first as the runtime manager reports them."""

    def __init__(self, pod: V1Pod) -> None:
        self.pod = pod
        self.statuses: list[ContainerStatus] = []
        self.sandboxes: list[api_pb2.PodSandboxStatus] = [sandbox()]
        self._next = 0

    def add(self, name: str, state: ContainerState, exit_code: int = 0,
            hash: int | None = None, finished_at: float = 0.0, reason: str = "") -> ContainerID:
        self._next += 1
        cid = ContainerID("containerd", f"{name}-{self._next}")
        status = ContainerStatus(
            id=cid, name=name, state=state, exit_code=exit_code, reason=reason,
            hash=hash_container(spec_of(self.pod, name)) if hash is None else hash,
            finished_at=finished_at, created_at=float(self._next))
        self.statuses.insert(0, status)
        return cid

    def build(self) -> PodStatus:
        return PodStatus(id=UID, name="web", namespace="default",
                         container_statuses=list(self.statuses),
                         sandbox_statuses=list(self.sandboxes))


RUNNING, EXITED = ContainerState.RUNNING, ContainerState.EXITED


# --- sandbox ---------------------------------------------------------------------------


def test_new_pod_gets_a_sandbox_and_all_containers() -> None:
    pod = make_pod(["a", "b"])
    actions = compute_pod_actions(pod, PodStatus(id=UID))
    assert actions.create_sandbox and actions.kill_pod
    assert actions.attempt == 0 and actions.sandbox_id == ""
    assert actions.containers_to_start == [0, 1]


def test_a_dead_sandbox_is_recreated_with_the_next_attempt_and_containers_restart() -> None:
    pod = make_pod(["a"])
    builder = StatusBuilder(pod)
    builder.sandboxes = [sandbox(state=api_pb2.SANDBOX_NOTREADY, attempt=2)]
    builder.add("a", EXITED, exit_code=137)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.create_sandbox and actions.kill_pod
    assert actions.attempt == 3 and actions.sandbox_id == "sb1"
    assert actions.containers_to_start == [0]


def test_host_network_flip_recreates_the_sandbox() -> None:
    pod = make_pod(["a"], host_network=True)
    builder = StatusBuilder(pod)
    builder.add("a", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.create_sandbox and actions.attempt == 1
    assert actions.containers_to_start == [0]


def test_sandbox_without_ip_is_recreated() -> None:
    pod = make_pod(["a"])
    builder = StatusBuilder(pod)
    builder.sandboxes = [sandbox(ip="")]
    builder.add("a", RUNNING)
    assert compute_pod_actions(pod, builder.build()).create_sandbox


def test_never_pod_whose_sandbox_died_after_running_is_not_recreated() -> None:
    pod = make_pod(["a"], restart_policy="Never")
    builder = StatusBuilder(pod)
    builder.sandboxes = [sandbox(state=api_pb2.SANDBOX_NOTREADY)]
    builder.add("a", EXITED, exit_code=0)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.kill_pod and not actions.create_sandbox
    assert actions.containers_to_start == []


def test_onfailure_pod_recreating_sandbox_skips_succeeded_containers() -> None:
    pod = make_pod(["ok", "bad"], restart_policy="OnFailure")
    builder = StatusBuilder(pod)
    builder.sandboxes = [sandbox(state=api_pb2.SANDBOX_NOTREADY)]
    builder.add("ok", EXITED, exit_code=0)
    builder.add("bad", EXITED, exit_code=1)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.create_sandbox
    assert actions.containers_to_start == [1]


def test_steady_running_pod_needs_nothing() -> None:
    pod = make_pod(["a", "b"])
    builder = StatusBuilder(pod)
    builder.add("a", RUNNING)
    builder.add("b", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.is_noop(), str(actions)


# --- restart policy ----------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "exit_code", "restarted"), [
    ("Always", 0, True), ("Always", 1, True),
    ("OnFailure", 0, False), ("OnFailure", 1, True),
    ("Never", 0, False), ("Never", 1, False),
])
def test_restart_policy_decides_whether_an_exited_container_starts_again(
        policy: str, exit_code: int, restarted: bool) -> None:
    pod = make_pod(["a", "b"], restart_policy=policy)
    builder = StatusBuilder(pod)
    builder.add("a", EXITED, exit_code=exit_code)
    builder.add("b", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.containers_to_start == ([0] if restarted else [])
    assert not actions.kill_pod  # b still runs


@pytest.mark.parametrize("policy", ["OnFailure", "Never"])
def test_pod_whose_containers_all_finished_for_good_is_killed(policy: str) -> None:
    pod = make_pod(["a"], restart_policy=policy)
    builder = StatusBuilder(pod)
    builder.add("a", EXITED, exit_code=0)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.kill_pod and not actions.create_sandbox
    assert actions.containers_to_start == []


def test_deleted_pod_does_not_restart_containers() -> None:
    pod = make_pod(["a"])
    pod.metadata.deletion_timestamp = "2026-01-01T00:00:00Z"
    builder = StatusBuilder(pod)
    builder.add("a", EXITED, exit_code=1)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.containers_to_start == [] and actions.kill_pod


def test_only_the_newest_instance_counts() -> None:
    pod = make_pod(["a"], restart_policy="OnFailure")
    builder = StatusBuilder(pod)
    builder.add("a", EXITED, exit_code=1)   # older failure
    builder.add("a", EXITED, exit_code=0)   # newest run succeeded
    actions = compute_pod_actions(pod, builder.build())
    assert actions.containers_to_start == []


def test_container_in_unknown_state_is_killed_before_restart() -> None:
    pod = make_pod(["a"])
    builder = StatusBuilder(pod)
    cid = builder.add("a", ContainerState.UNKNOWN)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.containers_to_start == [0]
    assert actions.containers_to_kill[cid].reason == KillReason.UNKNOWN


# --- spec changes and probes ------------------------------------------------------------


@pytest.mark.parametrize("policy", ["Always", "Never"])
def test_changed_spec_hash_kills_and_restarts_whatever_the_policy(policy: str) -> None:
    pod = make_pod(["a", "b"], restart_policy=policy)
    builder = StatusBuilder(pod)
    stale = builder.add("a", RUNNING, hash=12345)
    builder.add("b", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert list(actions.containers_to_kill) == [stale]
    assert actions.containers_to_kill[stale].message == (
        "Container a definition changed, will be restarted")
    assert actions.containers_to_start == [0]
    assert not actions.kill_pod


def test_edited_image_changes_the_hash() -> None:
    pod = make_pod(["a"])
    builder = StatusBuilder(pod)
    builder.add("a", RUNNING)
    edited = copy.deepcopy(pod)
    edited.spec.containers[0].image = "busybox:2"
    actions = compute_pod_actions(edited, builder.build())
    assert actions.containers_to_start == [0] and len(actions.containers_to_kill) == 1


class Verdicts:
    def __init__(self, results: dict[ContainerID, ProbeResult]) -> None:
        self.results = results

    def get(self, container_id: ContainerID) -> ProbeResult | None:
        return self.results.get(container_id)


def test_failed_liveness_probe_restarts_unless_policy_is_never() -> None:
    for policy, restarted in (("Always", True), ("Never", False)):
        pod = make_pod(["a"], restart_policy=policy)
        builder = StatusBuilder(pod)
        cid = builder.add("a", RUNNING)
        actions = compute_pod_actions(pod, builder.build(),
                                      liveness=Verdicts({cid: ProbeResult.FAILURE}))
        assert actions.containers_to_kill[cid].reason == KillReason.LIVENESS_PROBE
        assert actions.containers_to_start == ([0] if restarted else [])
        # With nothing left running and nothing to start, the sandbox goes too.
        assert actions.kill_pod == (not restarted)


# --- init containers ---------------------------------------------------------------------


def test_first_init_container_starts_alone_with_the_sandbox() -> None:
    pod = make_pod(["app"], init=["i1", "i2"])
    actions = compute_pod_actions(pod, PodStatus(id=UID))
    assert actions.create_sandbox
    assert actions.init_containers_to_start == [0]
    assert actions.containers_to_start == []


def test_running_init_container_blocks_everything_after_it() -> None:
    pod = make_pod(["app"], init=["i1", "i2"])
    builder = StatusBuilder(pod)
    builder.add("i1", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.is_noop(), str(actions)


def test_next_init_container_only_after_the_previous_exited_zero() -> None:
    pod = make_pod(["app"], init=["i1", "i2"])
    builder = StatusBuilder(pod)
    builder.add("i1", EXITED, exit_code=0)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.init_containers_to_start == [1]
    assert actions.containers_to_start == []


def test_app_containers_start_after_the_last_init_container_succeeded() -> None:
    pod = make_pod(["app", "app2"], init=["i1", "i2"])
    builder = StatusBuilder(pod)
    builder.add("i1", EXITED, exit_code=0)
    builder.add("i2", EXITED, exit_code=0)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.init_containers_to_start == []
    assert actions.containers_to_start == [0, 1]


def test_failed_init_container_is_retried_with_restart_policy_always() -> None:
    pod = make_pod(["app"], init=["i1", "i2"])
    builder = StatusBuilder(pod)
    builder.add("i1", EXITED, exit_code=0)
    builder.add("i2", EXITED, exit_code=3)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.init_containers_to_start == [1]
    assert actions.containers_to_start == [] and not actions.kill_pod


def test_failed_init_container_with_never_fails_the_pod() -> None:
    pod = make_pod(["app"], init=["i1"], restart_policy="Never")
    builder = StatusBuilder(pod)
    builder.add("i1", EXITED, exit_code=1)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.kill_pod and not actions.create_sandbox
    assert actions.init_containers_to_start == [] and actions.containers_to_start == []


def test_oom_killed_init_container_counts_as_failed() -> None:
    pod = make_pod(["app"], init=["i1"], restart_policy="Never")
    builder = StatusBuilder(pod)
    builder.add("i1", EXITED, exit_code=0, reason="OOMKilled")
    assert compute_pod_actions(pod, builder.build()).kill_pod


def test_init_containers_are_not_rerun_once_app_containers_run() -> None:
    pod = make_pod(["app"], init=["i1"])
    builder = StatusBuilder(pod)
    builder.add("app", RUNNING)  # i1's record was garbage collected
    actions = compute_pod_actions(pod, builder.build())
    assert actions.is_noop(), str(actions)


# --- sidecars (restartable init containers) -------------------------------------------------


def test_sidecar_counts_as_done_once_running_and_the_next_init_container_starts() -> None:
    pod = make_pod(["app"], init=["side", "i2"], sidecars={"side"})
    builder = StatusBuilder(pod)
    builder.add("side", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.init_containers_to_start == [1]
    assert actions.containers_to_start == []


def test_sidecars_start_in_order_one_per_sync() -> None:
    pod = make_pod(["app"], init=["s1", "s2"], sidecars={"s1", "s2"})
    first = compute_pod_actions(pod, PodStatus(id=UID))
    assert first.init_containers_to_start == [0]
    builder = StatusBuilder(pod)
    builder.add("s1", RUNNING)
    assert compute_pod_actions(pod, builder.build()).init_containers_to_start == [1]
    builder.add("s2", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.init_containers_to_start == []
    assert actions.containers_to_start == [0]


def test_exited_sidecar_is_restarted_while_the_app_runs() -> None:
    pod = make_pod(["app"], init=["side", "i2"], sidecars={"side"})
    builder = StatusBuilder(pod)
    builder.add("side", EXITED, exit_code=0)
    builder.add("i2", EXITED, exit_code=0)
    builder.add("app", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.init_containers_to_start == [0]
    assert actions.containers_to_start == [] and not actions.kill_pod


def test_sidecar_is_restarted_even_with_restart_policy_never() -> None:
    pod = make_pod(["app"], init=["side"], sidecars={"side"}, restart_policy="Never")
    builder = StatusBuilder(pod)
    builder.add("side", EXITED, exit_code=1)
    builder.add("app", RUNNING)
    assert compute_pod_actions(pod, builder.build()).init_containers_to_start == [0]


def test_running_sidecar_does_not_keep_a_finished_pod_alive() -> None:
    pod = make_pod(["app"], init=["side"], sidecars={"side"}, restart_policy="Never")
    builder = StatusBuilder(pod)
    builder.add("side", RUNNING)
    builder.add("app", EXITED, exit_code=0)
    actions = compute_pod_actions(pod, builder.build())
    assert actions.kill_pod and not actions.create_sandbox
    assert actions.init_containers_to_start == [] and actions.containers_to_start == []


def test_sidecar_with_changed_spec_is_restarted() -> None:
    pod = make_pod(["app"], init=["side"], sidecars={"side"})
    builder = StatusBuilder(pod)
    stale = builder.add("side", RUNNING, hash=1)
    builder.add("app", RUNNING)
    actions = compute_pod_actions(pod, builder.build())
    assert stale in actions.containers_to_kill
    assert actions.init_containers_to_start == [0]


# --- CrashLoopBackOff ------------------------------------------------------------------------


class WallClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def crashed(pod: V1Pod, finished_at: float) -> PodStatus:
    builder = StatusBuilder(pod)
    builder.add("a", EXITED, exit_code=1, finished_at=finished_at)
    return builder.build()


def test_first_crash_restarts_at_once_the_second_waits_10s_then_20s() -> None:
    pod = make_pod(["a"])
    clock = WallClock(1_000.0)
    backoff = Backoff(10, 300, clock)
    assert check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, 999.0), backoff) is None

    clock.now = 1_002.0
    message = check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, 1_001.0), backoff)
    assert message == f"back-off 10s restarting failed container=a pod=web_default({UID})"

    clock.now = 1_012.0  # 11s after the second crash: the 10s delay is over
    assert check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, 1_001.0),
                                 backoff) is None
    clock.now = 1_014.0
    message = check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, 1_013.0), backoff)
    assert message is not None and message.startswith("back-off 20s ")


def restart_after_crash(pod: V1Pod, backoff: Backoff, clock: WallClock) -> None:
    """The container crashes 1s after its restart; the kubelet retries once the delay is over."""
    finished_at = clock.now + 1
    clock.now = finished_at + 301
    assert check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, finished_at),
                                 backoff) is None


def test_backoff_caps_at_five_minutes() -> None:
    pod = make_pod(["a"])
    clock = WallClock(0.0)
    backoff = Backoff(10, 300, clock)
    for _ in range(12):
        restart_after_crash(pod, backoff, clock)
    clock.now += 2
    message = check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, clock.now - 1),
                                    backoff)
    assert message is not None and message.startswith("back-off 5m0s ")


def test_backoff_resets_after_running_ten_minutes() -> None:
    pod = make_pod(["a"])
    clock = WallClock(0.0)
    backoff = Backoff(10, 300, clock)
    for _ in range(4):
        restart_after_crash(pod, backoff, clock)
    assert backoff.get(backoff_key(pod, pod.spec.containers[0])) == 80
    # This time the container ran for more than 10 minutes before crashing.
    clock.now += 700
    assert check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, clock.now),
                                 backoff) is None
    clock.now += 2
    message = check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, clock.now - 1),
                                    backoff)
    assert message is not None and message.startswith("back-off 10s ")


def test_spec_change_starts_a_fresh_backoff() -> None:
    pod = make_pod(["a"])
    clock = WallClock(100.0)
    backoff = Backoff(10, 300, clock)
    check_restart_backoff(pod, pod.spec.containers[0], crashed(pod, 99.0), backoff)
    edited = copy.deepcopy(pod)
    edited.spec.containers[0].command = ["sh", "-c", "exit 0"]
    assert check_restart_backoff(edited, edited.spec.containers[0], crashed(pod, 99.5),
                                 backoff) is None


def test_never_exited_container_is_not_backed_off() -> None:
    pod = make_pod(["a"])
    backoff = Backoff(10, 300, WallClock(0.0))
    assert check_restart_backoff(pod, pod.spec.containers[0], PodStatus(id=UID), backoff) is None
    assert backoff.get("anything") == 0


@pytest.mark.parametrize(("seconds", "text"), [
    (10, "10s"), (20, "20s"), (160, "2m40s"), (300, "5m0s"), (3725, "1h2m5s"), (0, "0s"),
    (1.5, "1.5s"), (0.25, "250ms"),
])
def test_durations_print_like_go(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text


# --- kill grace periods and restart counts (rules the manager applies to these plans) -------


def grace_pod(termination: int | None = None, deletion: int | None = None,
              liveness_grace: int | None = None) -> V1Pod:
    pod = make_pod(["a"])
    pod.spec.termination_grace_period_seconds = termination
    pod.metadata.deletion_grace_period_seconds = deletion
    if liveness_grace is not None:
        pod.spec.containers[0].liveness_probe = V1Probe(
            termination_grace_period_seconds=liveness_grace)
    return pod


@pytest.mark.parametrize(("pod", "reason", "expected"), [
    (grace_pod(), KillReason.NONE, 2),
    (grace_pod(termination=30), KillReason.NONE, 30),
    (grace_pod(termination=30, deletion=5), KillReason.NONE, 5),
    (grace_pod(termination=30, liveness_grace=7), KillReason.LIVENESS_PROBE, 7),
    (grace_pod(termination=30, liveness_grace=7), KillReason.NONE, 30),
])
def test_grace_period_comes_from_deletion_then_probe_then_pod(
        pod: V1Pod, reason: KillReason, expected: int) -> None:
    assert termination_grace_period(pod, pod.spec.containers[0], reason) == expected


def test_restart_count_continues_from_log_files_when_the_runtime_forgot(tmp_path: Path) -> None:
    assert restart_count_from_log_dir(str(tmp_path / "missing")) == 0
    for name in ("0.log", "1.log", "3.log.20260101-000000", "notes.txt"):
        (tmp_path / name).write_text("")
    assert restart_count_from_log_dir(str(tmp_path)) == 4
