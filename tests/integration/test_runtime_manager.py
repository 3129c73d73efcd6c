"""The runtime manager against the real containerd: pods start, restart, stop and are adopted.

Each test drives ``KubeGenericRuntimeManager`` the way the pod workers do
(read the status, sync, repeat) and checks what a user would see in the pod's
status: states, restart counts, reasons, termination messages, IPs.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_from_dict
from pykubelet.container import ContainerState, PodStatus, PodSyncResult
from pykubelet.container.helpers import running_pod_from_status
from pykubelet.cri.image import RemoteImageService
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.kuberuntime import (
    KubeGenericRuntimeManager,
    RuntimeManagerOptions,
    compute_pod_actions,
)
from pykubelet.kuberuntime.gc import ContainerGC, GCPolicy
from pykubelet.util.backoff import Backoff
from testsupport.polling import wait_until_async
from testsupport.testbed import POD_SUBNET, Testbed

pytestmark = pytest.mark.containerd

WAIT_SECONDS = 30.0
RUNNING, EXITED = ContainerState.RUNNING, ContainerState.EXITED


class Node:
    """A runtime manager on the testbed, plus the pods to clean up after the test."""

    def __init__(self, testbed: Testbed, base: Path) -> None:
        self.testbed = testbed
        self.options = RuntimeManagerOptions(
            root_dir=str(base / "root"), pod_logs_dir=str(base / "pod-logs"),
            container_logs_dir=str(base / "container-logs"), node_name="node-1")
        self.pods: list[V1Pod] = []
        self.services: list[RemoteRuntimeService | RemoteImageService] = []
        self.manager = self.new_manager()

    def new_manager(self, backoff: Backoff | None = None) -> KubeGenericRuntimeManager:
        runtime = RemoteRuntimeService(self.testbed.endpoint)
        images = RemoteImageService(self.testbed.endpoint)
        self.services += [runtime, images]
        return KubeGenericRuntimeManager(runtime, images, self.options, backoff=backoff)

    def pod(self, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
            **spec: Any) -> V1Pod:
        uid = secrets.token_hex(8)

        def defaulted(container: dict[str, Any]) -> dict[str, Any]:
            # What the API server's defaulting would add to a container.
            return {"image": self.testbed.busybox_image, "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File", **container}

        body: dict[str, Any] = {"containers": [defaulted(c) for c in containers],
                                "terminationGracePeriodSeconds": 2, **spec}
        if init:
            body["initContainers"] = [defaulted(c) for c in init]
        pod = pod_from_dict({"metadata": {"name": f"p-{uid[:6]}", "namespace": "default",
                                          "uid": uid}, "spec": body})
        self.pods.append(pod)
        return pod

    async def status(self, pod: V1Pod, manager: KubeGenericRuntimeManager | None = None
                     ) -> PodStatus:
        return await (manager or self.manager).get_pod_status(
            pod.metadata.uid, pod.metadata.name, pod.metadata.namespace)

    async def sync(self, pod: V1Pod) -> PodSyncResult:
        return await self.manager.sync_pod(pod, await self.status(pod))

    async def wait_for(self, pod: V1Pod, condition: Callable[[PodStatus], bool],
                       what: str) -> PodStatus:
        async def reached() -> PodStatus | None:
            status = await self.status(pod)
            return status if condition(status) else None
        return await wait_until_async(reached, WAIT_SECONDS, what, interval=0.2)

    async def wait_exited(self, pod: V1Pod, name: str, restart_count: int) -> PodStatus:
        def exited(status: PodStatus) -> bool:
            latest = status.find_container_status(name)
            return (latest is not None and latest.state == EXITED
                    and latest.restart_count == restart_count)
        return await self.wait_for(pod, exited, f"{name} run {restart_count} to exit")

    async def cleanup(self) -> None:
        for pod in self.pods:
            status = await self.status(pod)
            await self.manager.kill_pod(pod, running_pod_from_status(
                status, self.manager.runtime_type), grace_period_override=0)
        # What the kubelet's container GC does with pods no source wants any more.
        await ContainerGC(self.manager, DeletedPods({p.metadata.uid for p in self.pods})
                          ).garbage_collect(all_sources_ready=True)
        for service in self.services:
            await service.close()


@pytest.fixture
async def node(testbed: Testbed, tmp_path: Path) -> AsyncIterator[Node]:
    node = Node(testbed, tmp_path)
    try:
        yield node
    finally:
        await node.cleanup()


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["sh", "-c", script], **extra}


def all_running(*names: str) -> Callable[[PodStatus], bool]:
    def check(status: PodStatus) -> bool:
        return all((s := status.find_container_status(n)) is not None and s.state == RUNNING
                   for n in names)
    return check


async def test_two_container_pod_runs_with_an_ip_from_the_pod_network(node: Node) -> None:
    pod = node.pod([sh("web", "sleep 3600"), sh("helper", "sleep 3600")])

    result = await node.sync(pod)

    assert result.error() is None, result.error()
    status = await node.status(pod)
    assert {s.name: s.state for s in status.container_statuses} == {
        "web": RUNNING, "helper": RUNNING}
    assert all(s.restart_count == 0 for s in status.container_statuses)
    assert status.ips and ipaddress.ip_address(status.ips[0]) in POD_SUBNET
    assert len(status.sandbox_statuses) == 1
    assert status.sandbox_statuses[0].state == api_pb2.SANDBOX_READY
    # Nothing left to do for the next sync.
    assert compute_pod_actions(pod, status).is_noop()
    # The runtime writes each container's output where the kubelet says.
    log_dir = Path(node.options.pod_logs_dir) / f"default_{pod.metadata.name}_{pod.metadata.uid}"
    assert (log_dir / "web" / "0.log").exists()


class RecordingRuntime(RemoteRuntimeService):
    def __init__(self, endpoint: str, calls: list[str]) -> None:
        super().__init__(endpoint)
        self.calls = calls

    async def run_pod_sandbox(self, config: api_pb2.PodSandboxConfig,
                              runtime_handler: str = "") -> str:
        self.calls.append("RunPodSandbox sent")
        sandbox_id = await super().run_pod_sandbox(config, runtime_handler)
        self.calls.append("RunPodSandbox returned")
        return sandbox_id


class RecordingImages(RemoteImageService):
    def __init__(self, endpoint: str, calls: list[str]) -> None:
        super().__init__(endpoint)
        self.calls = calls

    async def image_status(self, image: str, verbose: bool = False) -> api_pb2.Image | None:
        self.calls.append(f"ImageStatus {image}")
        return await super().image_status(image, verbose)


async def test_a_new_pods_image_is_looked_up_once_while_its_sandbox_is_created(
        node: Node) -> None:
    calls: list[str] = []
    runtime = RecordingRuntime(node.testbed.endpoint, calls)
    images = RecordingImages(node.testbed.endpoint, calls)
    node.services += [runtime, images]
    node.manager = KubeGenericRuntimeManager(runtime, images, node.options)
    pod = node.pod([sh("web", "sleep 3600"), sh("helper", "sleep 3600")])

    result = await node.sync(pod)

    assert result.error() is None, result.error()
    assert (await node.wait_for(pod, all_running("web", "helper"), "both containers"))
    # One read for the image both containers use, made while the runtime builds the sandbox.
    image_reads = [call for call in calls if call.startswith("ImageStatus")]
    assert image_reads == [f"ImageStatus {node.testbed.busybox_image}"]
    assert calls.index(image_reads[0]) < calls.index("RunPodSandbox returned")


@pytest.mark.parametrize(("policy", "exit_code", "restarts"), [
    ("Always", 0, True), ("Always", 1, True),
    ("OnFailure", 0, False), ("OnFailure", 1, True),
    ("Never", 0, False), ("Never", 1, False),
])
async def test_restart_policy_and_exit_code_decide_restarts(
        node: Node, policy: str, exit_code: int, restarts: bool) -> None:
    # A fast back-off keeps the test short; the real 10s delay has its own test.
    node.manager = node.new_manager(backoff=Backoff(0.1, 0.2, time.time))
    pod = node.pod([sh("job", f"sleep 0.3; exit {exit_code}")], restartPolicy=policy)

    for run in range(3):
        assert (await node.sync(pod)).error() is None
        status = await node.wait_exited(pod, "job", run if restarts else 0)
        await asyncio.sleep(0.3)  # past the back-off
    assert (await node.sync(pod)).error() is None

    status = await node.status(pod)
    latest = status.find_container_status("job")
    assert latest is not None
    if restarts:
        assert latest.restart_count >= 3
        assert len(status.statuses_of("job")) >= 2  # the previous run is kept for lastState
    else:
        assert latest.restart_count == 0 and latest.state == EXITED
        assert latest.exit_code == exit_code
        assert latest.reason == ("Completed" if exit_code == 0 else "Error")
        # A pod that is done gets its sandbox stopped.
        assert status.sandbox_statuses[0].state == api_pb2.SANDBOX_NOTREADY
        assert not status.ips


async def test_second_quick_failure_reports_crash_loop_back_off(node: Node) -> None:
    pod = node.pod([sh("crash", "exit 1")])

    assert (await node.sync(pod)).error() is None
    await node.wait_exited(pod, "crash", 0)
    assert (await node.sync(pod)).error() is None  # first restart is immediate
    await node.wait_exited(pod, "crash", 1)

    result = await node.sync(pod)

    failed = [r for r in result.results if r.error is not None]
    assert len(failed) == 1
    assert (failed[0].action, failed[0].target, failed[0].reason) == (
        "StartContainer", "crash", "CrashLoopBackOff")
    assert failed[0].message == (f"back-off 10s restarting failed container=crash "
                                 f"pod={pod.metadata.name}_default({pod.metadata.uid})")
    latest = (await node.status(pod)).find_container_status("crash")
    assert latest is not None and latest.restart_count == 1 and latest.state == EXITED


async def test_missing_image_is_reported_in_the_start_result(node: Node) -> None:
    pod = node.pod([sh("never", "true", image="pykubelet.local/missing:1",
                       imagePullPolicy="Never"),
                    sh("pull", "true", image="pykubelet.local/missing:1",
                       imagePullPolicy="IfNotPresent")])

    first = await node.sync(pod)
    second = await node.sync(pod)

    def reasons(result: PodSyncResult) -> dict[str, str]:
        return {r.target: r.reason for r in result.results if r.action == "StartContainer"}
    assert reasons(first) == {"never": "ErrImageNeverPull", "pull": "ErrImagePull"}
    assert reasons(second) == {"never": "ErrImageNeverPull", "pull": "ImagePullBackOff"}
    assert (await node.status(pod)).container_statuses == []


async def test_init_containers_run_one_after_another_before_the_app(node: Node) -> None:
    pod = node.pod(
        [sh("app", "echo app-started; sleep 3600")],
        init=[sh("first", "echo first-done > /dev/termination-log"),
              sh("second", "echo second-done > /dev/termination-log; echo from-second")])

    async def synced_until_the_app_runs() -> PodStatus | None:
        result = await node.sync(pod)
        assert result.error() is None, result.error()
        status = await node.status(pod)
        return status if all_running("app")(status) else None

    status = await wait_until_async(synced_until_the_app_runs, WAIT_SECONDS, "app running",
                                    interval=0.3)

    first = status.find_container_status("first")
    second = status.find_container_status("second")
    app = status.find_container_status("app")
    assert first is not None and second is not None and app is not None
    assert (first.state, first.exit_code, first.message) == (EXITED, 0, "first-done\n")
    assert (second.state, second.exit_code, second.message) == (EXITED, 0, "second-done\n")
    assert first.finished_at <= second.started_at
    assert second.finished_at <= app.started_at
    log_dir = Path(node.options.pod_logs_dir) / f"default_{pod.metadata.name}_{pod.metadata.uid}"
    assert "from-second" in (log_dir / "second" / "0.log").read_text()


async def test_failed_init_container_with_restart_policy_never_fails_the_pod(node: Node) -> None:
    pod = node.pod([sh("app", "sleep 3600")], init=[sh("setup", "exit 7")],
                   restartPolicy="Never")

    assert (await node.sync(pod)).error() is None
    await node.wait_exited(pod, "setup", 0)
    assert (await node.sync(pod)).error() is None

    status = await node.status(pod)
    assert status.find_container_status("app") is None  # never started
    setup = status.find_container_status("setup")
    assert setup is not None and setup.exit_code == 7 and setup.restart_count == 0
    assert status.sandbox_statuses[0].state == api_pb2.SANDBOX_NOTREADY


async def test_sidecar_runs_beside_the_app_and_is_restarted(node: Node) -> None:
    pod = node.pod([sh("app", "sleep 3600")],
                   init=[sh("proxy", "sleep 1; exit 1", restartPolicy="Always"),
                         sh("setup", "true")])

    async def synced_until_the_sidecar_restarted() -> PodStatus | None:
        assert (await node.sync(pod)).error() is None
        status = await node.status(pod)
        app = status.find_container_status("app")
        proxy = status.find_container_status("proxy")
        restarted = app is not None and proxy is not None and proxy.restart_count >= 1
        return status if restarted else None

    status = await wait_until_async(synced_until_the_sidecar_restarted, WAIT_SECONDS,
                                    "app running and the sidecar restarted", interval=0.3)
    setup = status.find_container_status("setup")
    first_proxy = status.statuses_of("proxy")[-1]
    assert setup is not None and setup.exit_code == 0
    # setup only started once the sidecar was running.
    assert first_proxy.started_at <= setup.started_at
    app = status.find_container_status("app")
    assert app is not None and app.state == RUNNING


async def test_termination_message_falls_back_to_the_log_on_error(node: Node) -> None:
    pod = node.pod([sh("job", "echo line-1; echo boom; exit 3",
                       terminationMessagePolicy="FallbackToLogsOnError")],
                   restartPolicy="Never")

    assert (await node.sync(pod)).error() is None
    status = await node.wait_exited(pod, "job", 0)

    job = status.find_container_status("job")
    assert job is not None and job.exit_code == 3
    assert job.message == "line-1\nboom\n"


async def test_kill_pod_stops_a_container_that_ignores_sigterm_after_the_grace_period(
        node: Node) -> None:
    pod = node.pod([sh("stubborn", "trap '' TERM; while true; do sleep 0.1; done"),
                    sh("polite", "sleep 3600")])
    assert (await node.sync(pod)).error() is None
    status = await node.wait_for(pod, all_running("stubborn", "polite"), "containers to run")

    started = time.monotonic()
    await node.manager.kill_pod(pod, running_pod_from_status(status, node.manager.runtime_type))
    elapsed = time.monotonic() - started

    assert 2.0 <= elapsed < 10.0
    status = await node.status(pod)
    stubborn = status.find_container_status("stubborn")
    assert stubborn is not None and stubborn.state == EXITED and stubborn.exit_code == 137
    assert all(s.state == EXITED for s in status.container_statuses)
    assert status.sandbox_statuses[0].state == api_pb2.SANDBOX_NOTREADY


async def test_changed_container_spec_is_restarted(node: Node) -> None:
    pod = node.pod([sh("web", "sleep 3600")])
    assert (await node.sync(pod)).error() is None
    before = await node.wait_for(pod, all_running("web"), "web to run")

    pod.spec.containers[0].command = ["sh", "-c", "echo v2; sleep 3600"]
    result = await node.manager.sync_pod(pod, before)

    assert result.error() is None
    assert [r.action for r in result.results if r.target == "web"] == [
        "KillContainer", "StartContainer"]
    after = await node.wait_for(pod, all_running("web"), "new web to run")
    web = after.find_container_status("web")
    assert web is not None and web.restart_count == 1
    assert web.id != before.find_container_status("web").id  # type: ignore[union-attr]


async def test_new_manager_adopts_running_pods_with_their_restart_counts(node: Node) -> None:
    pod = node.pod([sh("app", "sleep 3600"), sh("flaky", "sleep 3600")])
    assert (await node.sync(pod)).error() is None
    status = await node.wait_for(pod, all_running("app", "flaky"), "containers to run")
    # Make "flaky" exit once so it has a restart to remember.
    flaky = status.find_container_status("flaky")
    assert flaky is not None
    await node.manager.runtime_service.stop_container(flaky.id.id, 0)
    assert (await node.sync(pod)).error() is None
    status = await node.wait_for(pod, all_running("app", "flaky"), "flaky to restart")

    restarted_kubelet = node.new_manager()
    adopted = await node.status(pod, restarted_kubelet)
    listed = {p.id: p for p in await restarted_kubelet.get_pods(all_pods=False)}

    assert pod.metadata.uid in listed
    assert {c.id for c in listed[pod.metadata.uid].containers} == {
        s.id for s in status.container_statuses if s.state == RUNNING}
    assert [(s.id, s.restart_count) for s in adopted.container_statuses] == [
        (s.id, s.restart_count) for s in status.container_statuses]
    assert adopted.find_container_status("flaky").restart_count == 1  # type: ignore[union-attr]
    assert adopted.ips == status.ips
    assert compute_pod_actions(pod, adopted).is_noop()
    result = await restarted_kubelet.sync_pod(pod, adopted)
    assert result.error() is None
    assert [r.action for r in result.results] == ["ConfigPodSandbox"]  # nothing started/killed


async def test_kill_after_kubelet_restart_uses_the_grace_period_recorded_on_the_container(
        node: Node) -> None:
    pod = node.pod([sh("stubborn", "trap '' TERM; while true; do sleep 0.1; done")],
                   terminationGracePeriodSeconds=4)
    assert (await node.sync(pod)).error() is None
    await node.wait_for(pod, all_running("stubborn"), "stubborn to run")
    restarted_kubelet = node.new_manager()
    running = next(p for p in await restarted_kubelet.get_pods(all_pods=False)
                   if p.id == pod.metadata.uid)

    started = time.monotonic()
    await restarted_kubelet.kill_pod(None, running)  # the pod spec is gone
    elapsed = time.monotonic() - started

    assert 4.0 <= elapsed < 12.0
    status = await node.status(pod)
    assert all(s.state == EXITED for s in status.container_statuses)
    assert status.sandbox_statuses[0].state == api_pb2.SANDBOX_NOTREADY


async def test_sidecar_is_stopped_only_after_the_app_container(node: Node) -> None:
    # The app takes a second to finish after SIGTERM; the sidecar exits at once on SIGTERM.
    # (An app that outlives its whole grace period races the sidecar, whose wait ends then
    # too: upstream does not order those two.)
    pod = node.pod([sh("app", "trap 'sleep 1; exit 3' TERM; while true; do sleep 0.1; done")],
                   init=[sh("proxy", "trap 'exit 0' TERM; while true; do sleep 0.1; done",
                            restartPolicy="Always")],
                   terminationGracePeriodSeconds=3)
    async def synced_until_both_run() -> PodStatus | None:
        status = await node.status(pod)
        if all_running("proxy", "app")(status):
            return status
        assert (await node.manager.sync_pod(pod, status)).error() is None
        return None

    status = await wait_until_async(synced_until_both_run, WAIT_SECONDS,
                                    "the sidecar and the app running", interval=0.2)

    await node.manager.kill_pod(pod, running_pod_from_status(status, node.manager.runtime_type))

    status = await node.status(pod)
    app = status.find_container_status("app")
    proxy = status.find_container_status("proxy")
    assert app is not None and proxy is not None
    assert app.exit_code == 3  # finished on its own, a second after SIGTERM
    assert proxy.exit_code == 0  # exited on SIGTERM, which came only after the app stopped
    assert proxy.finished_at >= app.finished_at


async def test_garbage_collection_removes_dead_pods_and_keeps_live_ones(node: Node) -> None:
    dead = node.pod([sh("web", "sleep 3600")])
    live = node.pod([sh("job", "exit 1")])
    node.manager = node.new_manager(backoff=Backoff(0.1, 0.2, time.time))
    assert (await node.sync(dead)).error() is None
    for run in range(3):
        assert (await node.sync(live)).error() is None
        await node.wait_exited(live, "job", run)
        await asyncio.sleep(0.3)
    status = await node.wait_for(dead, all_running("web"), "web to run")
    await node.manager.kill_pod(dead, running_pod_from_status(status, node.manager.runtime_type))
    dead_logs = (Path(node.options.pod_logs_dir)
                 / f"default_{dead.metadata.name}_{dead.metadata.uid}")
    assert dead_logs.exists()
    dead_link_prefix = f"{dead.metadata.name}_default_web-"
    assert any(link.startswith(dead_link_prefix)
               for link in os.listdir(node.options.container_logs_dir))

    gc = ContainerGC(node.manager, DeletedPods({dead.metadata.uid}))
    await gc.garbage_collect(all_sources_ready=True)

    dead_status = await node.status(dead)
    assert dead_status.container_statuses == [] and dead_status.sandbox_statuses == []
    assert not dead_logs.exists()
    assert not any(link.startswith(dead_link_prefix)
                   for link in os.listdir(node.options.container_logs_dir))
    live_status = await node.status(live)
    # Only the newest finished run of the live pod's container is kept, and its sandbox.
    assert [s.restart_count for s in live_status.container_statuses] == [2]
    assert len(live_status.sandbox_statuses) == 1


async def test_garbage_collection_enforces_the_total_and_the_died_event_deletor(
        node: Node) -> None:
    crashing = [node.pod([sh("a", "exit 1")]), node.pod([sh("b", "exit 1")])]
    node.manager = node.new_manager(backoff=Backoff(0.1, 0.2, time.time))
    for run in range(3):
        for pod in crashing:
            assert (await node.sync(pod)).error() is None
        for pod in crashing:
            await node.wait_exited(pod, pod.spec.containers[0].name, run)
        await asyncio.sleep(0.3)
    # Three dead instances each. The per-event deletor keeps the newest one of "a".
    status = await node.status(crashing[0])
    newest = max(status.container_statuses, key=lambda c: c.created_at)
    gc = ContainerGC(node.manager, DeletedPods(set()),
                     GCPolicy(max_per_pod_container=-1, max_containers=1))
    removed = await gc.delete_containers_in_pod(newest.id.id, status, remove_all=False)
    assert len(removed) == 2
    assert [c.id for c in (await node.status(crashing[0])).container_statuses] == [newest.id]
    # A total of one: the groups keep one each at first, then the oldest overall goes.
    await gc.garbage_collect(all_sources_ready=True)
    left = [(await node.status(p)).container_statuses for p in crashing]
    assert sum(len(c) for c in left) == 1
    assert left[1] and left[1][0].restart_count == 2  # b's last run was created last


class DeletedPods:
    """The pod workers' verdicts, for pods this test deleted."""

    def __init__(self, deleted: set[str]) -> None:
        self.deleted = deleted

    def should_pod_content_be_removed(self, uid: str) -> bool:
        return uid in self.deleted

    def should_pod_runtime_be_removed(self, uid: str) -> bool:
        return uid in self.deleted
