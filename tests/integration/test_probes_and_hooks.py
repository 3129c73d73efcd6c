"""Probes and lifecycle hooks through a real pykubelet and real containers."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from testsupport.kubelet_process import (
    KubeletProcess,
    busybox_pod,
    exec_in,
    free_port,
)
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd


def exec_probe(*command: str, **fields: Any) -> dict[str, Any]:
    return {"exec": {"command": list(command)}, "periodSeconds": 1, **fields}


def pod_ready(kubelet: KubeletProcess, name: str) -> bool | None:
    conditions = {c["type"]: c["status"] for c in kubelet.status(name).get("conditions") or []}
    if "Ready" not in conditions:
        return None
    return conditions["Ready"] == "True"


def test_readiness_flips_the_pod_ready_condition_both_ways(kubelet: KubeletProcess,
                                                           testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("ready", [{
        "name": "c", "command": ["sh", "-c", "sleep 3600"],
        "readinessProbe": exec_probe("test", "-f", "/tmp/ready")}], testbed.busybox_image))
    container = kubelet.wait_for(
        lambda: (c := kubelet.container_status("ready", "c")).get("containerID") and c, 60,
        "container started")
    time.sleep(2)
    assert pod_ready(kubelet, "ready") is False
    assert kubelet.container_status("ready", "c")["ready"] is False
    assert exec_in(kubelet.endpoint, container["containerID"], "touch", "/tmp/ready") == 0
    kubelet.wait_for(lambda: pod_ready(kubelet, "ready") is True, 20, "pod Ready")
    assert kubelet.container_status("ready", "c")["ready"] is True
    assert exec_in(kubelet.endpoint, container["containerID"], "rm", "/tmp/ready") == 0
    kubelet.wait_for(lambda: pod_ready(kubelet, "ready") is False, 20, "pod not Ready")
    conditions = {c["type"]: c for c in kubelet.status("ready")["conditions"]}
    assert conditions["ContainersReady"]["status"] == "False"
    assert "c" in conditions["Ready"]["message"]
    assert kubelet.container_status("ready", "c")["restartCount"] == 0


def test_liveness_failure_restarts_the_container(kubelet: KubeletProcess,
                                                 testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("live", [{
        "name": "c", "command": ["sh", "-c", "touch /tmp/alive; sleep 3600"],
        "livenessProbe": exec_probe("test", "-f", "/tmp/alive", failureThreshold=2)}],
        testbed.busybox_image, terminationGracePeriodSeconds=2))
    first = kubelet.wait_for(
        lambda: (c := kubelet.container_status("live", "c")).get("started") and c, 60, "started")
    time.sleep(3)
    assert kubelet.container_status("live", "c")["restartCount"] == 0
    assert exec_in(kubelet.endpoint, first["containerID"], "rm", "/tmp/alive") == 0
    restarted = kubelet.wait_for(
        lambda: (c := kubelet.container_status("live", "c")).get("restartCount", 0) >= 1 and c,
        40, "restart after liveness failure")
    assert restarted["containerID"] != first["containerID"]
    unhealthy = kubelet.events("Unhealthy")
    killing = kubelet.events("Killing")
    assert unhealthy and "Liveness probe failed" in unhealthy[0]
    assert killing and "failed liveness probe" in killing[0]
    assert kubelet.log_text().index(unhealthy[0]) < kubelet.log_text().index(killing[0])
    assert 'prober_probe_total{' in kubelet.probe_metrics()
    metrics = [line for line in kubelet.probe_metrics().splitlines()
               if line.startswith("prober_probe_total{") and 'probe_type="Liveness"' in line
               and 'result="failed"' in line and 'container="c"' in line]
    assert metrics and float(metrics[0].rsplit(" ", 1)[1]) >= 2


def test_startup_probe_holds_liveness_off_until_it_succeeds(kubelet: KubeletProcess,
                                                            testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("slow", [{
        "name": "c", "command": ["sh", "-c", "sleep 3600"],
        "startupProbe": exec_probe("test", "-f", "/tmp/started", failureThreshold=60),
        "livenessProbe": exec_probe("false", failureThreshold=1)}],
        testbed.busybox_image, terminationGracePeriodSeconds=2))
    first = kubelet.wait_for(
        lambda: (c := kubelet.container_status("slow", "c")).get("containerID") and c, 60,
        "container running")
    time.sleep(5)  # liveness would have killed it several times over by now
    status = kubelet.container_status("slow", "c")
    assert status["restartCount"] == 0 and status["started"] is False
    assert exec_in(kubelet.endpoint, first["containerID"], "touch", "/tmp/started") == 0
    kubelet.wait_for(lambda: kubelet.container_status("slow", "c").get("restartCount", 0) >= 1,
                     40, "liveness active after startup succeeded")


def test_exec_probe_that_outlives_its_timeout_fails(kubelet: KubeletProcess,
                                                    testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("timeout", [{
        "name": "c", "command": ["sh", "-c", "sleep 3600"],
        "readinessProbe": exec_probe("sleep", "5", timeoutSeconds=1, periodSeconds=2)}],
        testbed.busybox_image))
    kubelet.wait_for(lambda: kubelet.events("Unhealthy"), 40, "readiness failure event")
    assert "timed out" in kubelet.events("Unhealthy")[0]
    assert kubelet.container_status("timeout", "c")["ready"] is False


class HealthServer:
    """A standard gRPC health server on 127.0.0.1, run in a thread of the test process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.servicer = health.HealthServicer()
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)

    async def _serve(self) -> None:
        self._server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, self._server)
        self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self._server.start()

    def set(self, service: str, serving: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        self.servicer.set(service, status)

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(None), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def test_grpc_probe_against_a_health_server(kubelet: KubeletProcess, testbed: Testbed) -> None:
    server = HealthServer()
    server.start()
    try:
        server.set("kv", False)
        # A host-network pod: the probe dials the pod IP (the node's), where the server listens.
        kubelet.write_pod(busybox_pod("grpc", [{
            "name": "c", "command": ["sh", "-c", "sleep 3600"],
            "readinessProbe": {"grpc": {"port": server.port, "service": "kv"},
                               "periodSeconds": 1}}],
            testbed.busybox_image, hostNetwork=True))
        kubelet.wait_for(lambda: kubelet.container_status("grpc", "c").get("containerID"), 60,
                         "container started")
        time.sleep(2)
        assert kubelet.container_status("grpc", "c")["ready"] is False
        server.set("kv", True)
        kubelet.wait_for(lambda: kubelet.container_status("grpc", "c").get("ready"), 20,
                         "ready once SERVING")
        server.set("kv", False)
        kubelet.wait_for(lambda: kubelet.container_status("grpc", "c").get("ready") is False, 20,
                         "not ready once NOT_SERVING")
    finally:
        server.stop()


def test_failing_post_start_hook_kills_the_container(kubelet: KubeletProcess,
                                                     testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("poststart", [{
        "name": "c", "command": ["sh", "-c", "sleep 3600"],
        "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo nope; exit 1"]}}}}],
        testbed.busybox_image, terminationGracePeriodSeconds=2))
    kubelet.wait_for(lambda: kubelet.events("FailedPostStartHook"), 60, "FailedPostStartHook")
    assert "nope" in kubelet.events("FailedPostStartHook")[0]
    kubelet.wait_for(
        lambda: kubelet.container_status("poststart", "c").get("restartCount", 0) >= 1
        or kubelet.container_status("poststart", "c").get("state", {}).get("waiting"),
        60, "container killed and restarted or backing off")
    assert kubelet.container_status("poststart", "c").get("ready") is not True


def test_post_start_hook_runs_after_start(kubelet: KubeletProcess, testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("hooked", [{
        "name": "c", "command": ["sh", "-c", "sleep 3600"],
        "lifecycle": {"postStart": {"exec": {"command": ["touch", "/tmp/post-start-ran"]}}}}],
        testbed.busybox_image))
    status = kubelet.wait_for(
        lambda: (c := kubelet.container_status("hooked", "c")).get("ready") and c, 60, "ready")
    assert exec_in(kubelet.endpoint, status["containerID"], "test", "-f",
                   "/tmp/post-start-ran") == 0


def test_pre_stop_runs_before_the_container_gets_sigterm(kubelet: KubeletProcess,
                                                         testbed: Testbed,
                                                         tmp_path: Path) -> None:
    # Both write to a hostPath file: the container log goes with the pod's clean-up as soon
    # as the container has stopped (as upstream removes a deleted pod's dead containers).
    out = tmp_path / "prestop-out"
    out.mkdir()
    script = ("trap 'echo got-sigterm >> /out/log; exit 0' TERM; echo up; "
              "while true; do sleep 0.2; done")
    path = kubelet.write_pod(busybox_pod("prestop", [{
        "name": "c", "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "out", "mountPath": "/out"}],
        "lifecycle": {"preStop": {"exec": {"command": [
            "sh", "-c", "echo pre-stop-ran >> /out/log; sleep 1"]}}}}],
        testbed.busybox_image, terminationGracePeriodSeconds=10,
        volumes=[{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]))
    kubelet.wait_for(lambda: kubelet.container_status("prestop", "c").get("ready"), 60, "ready")
    path.unlink()
    log = out / "log"
    kubelet.wait_for(lambda: "got-sigterm" in log.read_text(), 30, "container stopped")
    text = log.read_text()
    assert "pre-stop-ran" in text
    assert text.index("pre-stop-ran") < text.index("got-sigterm")
