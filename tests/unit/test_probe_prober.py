"""The Prober: from a container's V1Probe to one check, its events and its retries.

HTTP, TCP and gRPC probes run against real servers on 127.0.0.1 (used as the
pod IP); exec probes use a fake of the CRI ``exec_sync`` seam.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc
import pytest
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerPort,
    V1EnvVar,
    V1EnvVarSource,
    V1ExecAction,
    V1GRPCAction,
    V1HTTPGetAction,
    V1ObjectFieldSelector,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1Probe,
    V1TCPSocketAction,
)

from pykubelet.container import ContainerID, ProbeResult
from pykubelet.cri.errors import CRIError
from pykubelet.cri.runtime import ExecSyncResult
from pykubelet.events import WARNING, Event, LoggingRecorder
from pykubelet.prober.prober import MAX_PROBE_RETRIES, Prober
from tests.unit.loopback import closed_port, serve

CONTAINER_ID = ContainerID("containerd", "c0ffee")
STATUS = V1PodStatus(pod_ip="127.0.0.1")


class FakeRuntime:
    def __init__(self, *answers: ExecSyncResult | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, list[str], float]] = []

    async def exec_sync(self, container_id: str, cmd: Sequence[str],
                        timeout_seconds: float) -> ExecSyncResult:
        self.calls.append((container_id, list(cmd), timeout_seconds))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Recorded:
    def __init__(self) -> None:
        self.recorder = LoggingRecorder()
        self.events: list[Event] = []
        self.recorder.listeners.append(self.events.append)


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
async def http_port() -> AsyncIterator[int]:
    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="body")

    async def away(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://localhost:{request.url.port}/status/200")

    app = web.Application()
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/away", away)
    async with serve(app) as port:
        yield port


def _pod(container: V1Container) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name="web", namespace="shop", uid="uid-1"),
                 spec=V1PodSpec(containers=[container]))






async def test_http_probe_on_named_port_at_pod_ip(http_port: int, recorded: Recorded) -> None:
    container = V1Container(
        name="app", ports=[V1ContainerPort(name="web", container_port=http_port)],
        readiness_probe=V1Probe(http_get=V1HTTPGetAction(path="/status/200", port="web")))
    prober = Prober(FakeRuntime(ExecSyncResult(b"", b"", 0)), recorded.recorder)
    result = await prober.probe("readiness", _pod(container), STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.SUCCESS
    assert recorded.events == []


async def test_failure_records_unhealthy_event_on_the_container(
        http_port: int, recorded: Recorded) -> None:
    container = V1Container(
        name="app",
        liveness_probe=V1Probe(http_get=V1HTTPGetAction(path="/status/500", port=http_port)))
    pod = _pod(container)
    prober = Prober(FakeRuntime(ExecSyncResult(b"", b"", 0)), recorded.recorder)
    result = await prober.probe("liveness", pod, STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.FAILURE
    message = "Liveness probe failed: HTTP probe failed with statuscode: 500"
    assert recorded.events == [Event("shop/web", WARNING, "Unhealthy", message,
                                     "spec.containers{app}")]


async def test_redirect_elsewhere_succeeds_with_probe_warning_event(
        http_port: int, recorded: Recorded) -> None:
    container = V1Container(
        name="app", startup_probe=V1Probe(http_get=V1HTTPGetAction(path="/away", port=http_port)))
    prober = Prober(FakeRuntime(ExecSyncResult(b"", b"", 0)), recorded.recorder)
    result = await prober.probe("startup", _pod(container), STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.SUCCESS
    [event] = recorded.events
    assert (event.reason, event.type) == ("ProbeWarning", WARNING)
    assert event.message.startswith("Startup probe warning: Probe terminated redirects")


async def test_exec_probe_expands_static_env_and_uses_timeout(recorded: Recorded) -> None:
    container = V1Container(
        name="app",
        env=[V1EnvVar(name="FILE", value="/tmp/ready"),
             V1EnvVar(name="NODE", value_from=V1EnvVarSource(
                 field_ref=V1ObjectFieldSelector(field_path="spec.nodeName")))],
        liveness_probe=V1Probe(timeout_seconds=4, _exec=V1ExecAction(
            command=["cat", "$(FILE)", "$(NODE)", "$$(FILE)"])))
    runtime = FakeRuntime(ExecSyncResult(b"", b"", 0))
    result = await Prober(runtime, recorded.recorder).probe(
        "liveness", _pod(container), STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.SUCCESS
    assert runtime.calls == [("c0ffee", ["cat", "/tmp/ready", "$(NODE)", "$(FILE)"], 4.0)]


async def test_exec_timeout_defaults_to_one_second(recorded: Recorded) -> None:
    container = V1Container(name="app",
                            readiness_probe=V1Probe(_exec=V1ExecAction(command=["true"])))
    runtime = FakeRuntime(ExecSyncResult(b"", b"", 0))
    await Prober(runtime, recorded.recorder).probe("readiness", _pod(container), STATUS,
                                                   container, CONTAINER_ID)
    assert runtime.calls[0][2] == 1.0


async def test_runtime_errors_are_retried_then_reported_as_errored(recorded: Recorded) -> None:
    container = V1Container(name="app",
                            liveness_probe=V1Probe(_exec=V1ExecAction(command=["true"])))
    runtime = FakeRuntime(CRIError("ExecSync", grpc.StatusCode.UNAVAILABLE, "runtime down"))
    result = await Prober(runtime, recorded.recorder).probe(
        "liveness", _pod(container), STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.UNKNOWN
    assert len(runtime.calls) == MAX_PROBE_RETRIES
    [event] = recorded.events
    assert event.reason == "Unhealthy"
    assert event.message.startswith("Liveness probe errored: ExecSync failed")


async def test_a_transient_runtime_error_is_retried_to_a_verdict(recorded: Recorded) -> None:
    container = V1Container(name="app",
                            liveness_probe=V1Probe(_exec=V1ExecAction(command=["check"])))
    runtime = FakeRuntime(CRIError("ExecSync", grpc.StatusCode.UNAVAILABLE, "blip"),
                          ExecSyncResult(b"sick\n", b"", 1))
    result = await Prober(runtime, recorded.recorder).probe(
        "liveness", _pod(container), STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.FAILURE
    assert len(runtime.calls) == 2
    assert [e.message for e in recorded.events] == ["Liveness probe failed: sick\n"]


async def test_unknown_port_name_is_errored(recorded: Recorded) -> None:
    container = V1Container(name="app",
                            readiness_probe=V1Probe(tcp_socket=V1TCPSocketAction(port="db")))
    result = await Prober(FakeRuntime(ExecSyncResult(b"", b"", 0)), recorded.recorder).probe(
        "readiness", _pod(container), STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.UNKNOWN
    assert recorded.events[0].message.startswith("Readiness probe errored:")


async def test_tcp_probe_reaches_pod_ip(recorded: Recorded, http_port: int) -> None:
    closed = closed_port()
    open_probe = V1Container(name="app",
                             liveness_probe=V1Probe(tcp_socket=V1TCPSocketAction(port=http_port)))
    closed_probe = V1Container(name="app",
                               liveness_probe=V1Probe(tcp_socket=V1TCPSocketAction(port=closed)))
    prober = Prober(FakeRuntime(ExecSyncResult(b"", b"", 0)), recorded.recorder)
    assert await prober.probe("liveness", _pod(open_probe), STATUS, open_probe,
                              CONTAINER_ID) is ProbeResult.SUCCESS
    assert await prober.probe("liveness", _pod(closed_probe), STATUS, closed_probe,
                              CONTAINER_ID) is ProbeResult.FAILURE
    assert recorded.events[0].message == (
        f"Liveness probe failed: dial tcp 127.0.0.1:{closed}: connect: connection refused")


async def test_grpc_probe_with_service(recorded: Recorded) -> None:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await servicer.set("api", health_pb2.HealthCheckResponse.NOT_SERVING)
    try:
        container = V1Container(name="app", readiness_probe=V1Probe(
            grpc=V1GRPCAction(port=port, service="api")))
        result = await Prober(FakeRuntime(ExecSyncResult(b"", b"", 0)), recorded.recorder).probe(
            "readiness", _pod(container), STATUS, container, CONTAINER_ID)
    finally:
        await server.stop(None)
    assert result is ProbeResult.FAILURE
    assert recorded.events[0].message == (
        'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")')


async def test_container_without_that_probe_is_healthy(recorded: Recorded) -> None:
    container = V1Container(name="app")
    result = await Prober(FakeRuntime(ExecSyncResult(b"", b"", 1)), recorded.recorder).probe(
        "liveness", _pod(container), STATUS, container, CONTAINER_ID)
    assert result is ProbeResult.SUCCESS


async def test_init_container_events_name_the_init_container(recorded: Recorded) -> None:
    sidecar = V1Container(name="proxy", restart_policy="Always",
                          readiness_probe=V1Probe(_exec=V1ExecAction(command=["false"])))
    pod = V1Pod(metadata=V1ObjectMeta(name="web", namespace="shop", uid="uid-1"),
                spec=V1PodSpec(containers=[V1Container(name="app")], init_containers=[sidecar]))
    await Prober(FakeRuntime(ExecSyncResult(b"", b"", 1)), recorded.recorder).probe(
        "readiness", pod, STATUS, sidecar, CONTAINER_ID)
    assert recorded.events[0].field_path == "spec.initContainers{proxy}"
