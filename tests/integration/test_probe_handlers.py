"""Probe checks and lifecycle hooks against real busybox containers in containerd.

Each test runs a pod whose busybox container serves ``/www`` with ``httpd`` on
port 8080 (a CGI script under ``/cgi-bin/mark`` leaves a file behind so hooks
can be seen arriving), then probes it the way the kubelet does: exec through
CRI ExecSync, HTTP and TCP to the pod IP from the sandbox status.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerPort,
    V1ExecAction,
    V1HTTPGetAction,
    V1LifecycleHandler,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1Probe,
    V1SleepAction,
    V1TCPSocketAction,
)

from pykubelet.container import ContainerID, ProbeResult
from pykubelet.cri import CRIError, RemoteRuntimeService, is_not_found
from pykubelet.events import Event, LoggingRecorder
from pykubelet.lifecycle import HandlerRunner, LifecycleHookError
from pykubelet.probe import user_agent
from pykubelet.prober.prober import Prober
from testsupport.polling import wait_until_async
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

HTTP_PORT = 8080
CLOSED_PORT = 9000
# Serves /www on 8080; the CGI script records each hit and its User-Agent.
SERVER_SCRIPT = """
mkdir -p /www/cgi-bin
echo ready > /www/ok.html
cat > /www/cgi-bin/mark <<'EOF'
#!/bin/sh
echo "$HTTP_USER_AGENT" >> /tmp/marks
printf 'Content-Type: text/plain\\r\\n\\r\\nmarked\\n'
EOF
chmod +x /www/cgi-bin/mark
exec httpd -f -p 8080 -h /www
"""


@dataclass
class RunningPod:
    runtime: RemoteRuntimeService
    pod: V1Pod
    container: V1Container
    container_id: ContainerID
    ip: str

    @property
    def status(self) -> V1PodStatus:
        return V1PodStatus(pod_ip=self.ip)

    async def read(self, path: str) -> str:
        result = await self.runtime.exec_sync(self.container_id.id, ["cat", path], 10)
        return result.stdout.decode() if result.exit_code == 0 else ""


@pytest.fixture
async def running(testbed: Testbed, runtime: RemoteRuntimeService,
                  tmp_path: Path) -> AsyncIterator[RunningPod]:
    suffix = secrets.token_hex(4)
    name, uid = f"probes-{suffix}", f"uid-{suffix}"
    log_dir = tmp_path / "pod-logs"
    log_dir.mkdir()
    sandbox_config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace="default", uid=uid, attempt=0),
        hostname=name, log_directory=str(log_dir),
        linux=api_pb2.LinuxPodSandboxConfig(cgroup_parent=""))
    sandbox_id = await runtime.run_pod_sandbox(sandbox_config)
    try:
        container_config = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="web", attempt=0),
            image=api_pb2.ImageSpec(image=testbed.busybox_image),
            command=["sh", "-c", SERVER_SCRIPT], log_path="web/0.log")
        container_id = await runtime.create_container(sandbox_id, container_config,
                                                      sandbox_config)
        await runtime.start_container(container_id)
        ip = (await runtime.pod_sandbox_status(sandbox_id)).status.network.ip
        assert ip, "the sandbox got no pod IP"
        container = V1Container(name="web", image=testbed.busybox_image,
                                ports=[V1ContainerPort(name="http", container_port=HTTP_PORT)])
        pod = V1Pod(metadata=V1ObjectMeta(name=name, namespace="default", uid=uid),
                    spec=V1PodSpec(containers=[container]))
        running = RunningPod(runtime, pod, container, ContainerID("containerd", container_id),
                             ip)
        await _wait_until_serving(running)
        yield running
    finally:
        for step in (runtime.stop_pod_sandbox, runtime.remove_pod_sandbox):
            try:
                await step(sandbox_id)
            except CRIError as err:
                if not is_not_found(err):
                    raise


async def _wait_until_serving(running: RunningPod) -> None:
    async def serving() -> bool:
        result = await running.runtime.exec_sync(
            running.container_id.id, ["wget", "-q", "-O-", f"http://127.0.0.1:{HTTP_PORT}/ok.html"],
            5)
        return result.exit_code == 0
    await wait_until_async(serving, 20, "httpd in the test pod to answer", interval=0.2)


def _with_probe(running: RunningPod, probe: V1Probe) -> V1Container:
    container = running.container
    return V1Container(name=container.name, image=container.image, ports=container.ports,
                       liveness_probe=probe)


async def _probe(running: RunningPod, probe: V1Probe,
                 events: list[Event] | None = None) -> ProbeResult:
    recorder = LoggingRecorder()
    if events is not None:
        recorder.listeners.append(events.append)
    container = _with_probe(running, probe)
    return await Prober(running.runtime, recorder).probe(
        "liveness", running.pod, running.status, container, running.container_id)


async def test_exec_probe_success_and_failure(running: RunningPod) -> None:
    events: list[Event] = []
    healthy = V1Probe(_exec=V1ExecAction(command=["cat", "/www/ok.html"]))
    sick = V1Probe(_exec=V1ExecAction(command=["sh", "-c", "echo not ready; exit 1"]))
    assert await _probe(running, healthy, events) is ProbeResult.SUCCESS
    assert await _probe(running, sick, events) is ProbeResult.FAILURE
    assert [(e.reason, e.message) for e in events] == [
        ("Unhealthy", "Liveness probe failed: not ready\n")]


async def test_exec_probe_outliving_its_timeout_fails(running: RunningPod) -> None:
    events: list[Event] = []
    slow = V1Probe(timeout_seconds=1, _exec=V1ExecAction(command=["sleep", "30"]))
    started = time.monotonic()
    assert await _probe(running, slow, events) is ProbeResult.FAILURE
    assert time.monotonic() - started < 15
    assert events[0].message == 'Liveness probe failed: command "sleep 30" timed out'


async def test_http_probe_against_httpd_in_the_pod(running: RunningPod) -> None:
    events: list[Event] = []
    found = V1Probe(http_get=V1HTTPGetAction(path="/ok.html", port="http"))
    missing = V1Probe(http_get=V1HTTPGetAction(path="/missing.html", port=HTTP_PORT))
    assert await _probe(running, found, events) is ProbeResult.SUCCESS
    assert await _probe(running, missing, events) is ProbeResult.FAILURE
    assert [e.message for e in events] == [
        "Liveness probe failed: HTTP probe failed with statuscode: 404"]


async def test_tcp_probe_open_and_closed_port(running: RunningPod) -> None:
    events: list[Event] = []
    open_port = V1Probe(tcp_socket=V1TCPSocketAction(port="http"))
    closed_port = V1Probe(tcp_socket=V1TCPSocketAction(port=CLOSED_PORT))
    assert await _probe(running, open_port, events) is ProbeResult.SUCCESS
    assert await _probe(running, closed_port, events) is ProbeResult.FAILURE
    assert events[0].message == (f"Liveness probe failed: dial tcp {running.ip}:{CLOSED_PORT}: "
                                 "connect: connection refused")


def _hooks(running: RunningPod) -> HandlerRunner:
    return HandlerRunner(running.runtime, lambda pod: running.ip, LoggingRecorder())


async def test_exec_hook_runs_in_the_container(running: RunningPod) -> None:
    handler = V1LifecycleHandler(_exec=V1ExecAction(
        command=["sh", "-c", "echo started > /tmp/hook; echo done"]))
    output = await _hooks(running).run(running.container_id, running.pod, running.container,
                                       handler)
    assert output == "done\n"
    assert await running.read("/tmp/hook") == "started\n"


async def test_failing_exec_hook_raises_with_its_output(running: RunningPod) -> None:
    handler = V1LifecycleHandler(_exec=V1ExecAction(
        command=["sh", "-c", "echo cannot warm up; exit 7"]))
    with pytest.raises(LifecycleHookError) as caught:
        await _hooks(running).run(running.container_id, running.pod, running.container, handler)
    assert "exited with 7" in str(caught.value)
    assert "cannot warm up" in str(caught.value)


async def test_http_hook_reaches_the_pod(running: RunningPod) -> None:
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/cgi-bin/mark", port="http"))
    await _hooks(running).run(running.container_id, running.pod, running.container, handler)
    assert await running.read("/tmp/marks") == f"{user_agent('lifecycle')}\n"

    closed = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/drain", port=CLOSED_PORT))
    with pytest.raises(LifecycleHookError, match="connection refused"):
        await _hooks(running).run(running.container_id, running.pod, running.container, closed)


async def test_sleep_hook(running: RunningPod) -> None:
    started = time.monotonic()
    await _hooks(running).run(running.container_id, running.pod, running.container,
                              V1LifecycleHandler(sleep=V1SleepAction(seconds=1)))
    assert 1 <= time.monotonic() - started < 5
