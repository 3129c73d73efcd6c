"""pykubelet in standalone mode: static pod files to running containers on real containerd.

Each test starts the real ``pykubelet`` command against the testbed's
containerd, writes manifests, and checks what a user sees: the pod statuses
served on the read-only ``/pods`` endpoint and the runtime's own containers.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import signal
import socket
import threading
import time
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pykubelet.kuberuntime.gc import CONTAINER_GC_PERIOD
from tests.integration.test_volumes import wait_log
from tests.unit.hostile_input import hostile_manifests, refused_manifests_missing_from
from testsupport.kubelet_process import (
    KubeletProcess,
    busybox_pod,
    free_port,
    remove_everything,
    runtime_view,
)
from testsupport.testbed import POD_SUBNET, Testbed

pytestmark = pytest.mark.containerd


def node_address() -> str:
    """A non-loopback address of this machine: host ports are published on the node's IPs."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))  # UDP connect sends nothing; it picks a route
        return str(probe.getsockname()[0])


def sleeper(name: str, script: str = "sleep 3600") -> dict[str, Any]:
    return {"name": name, "command": ["sh", "-c", script]}


def started_at(status: dict[str, Any]) -> datetime:
    running = status["state"].get("running") or status["state"].get("terminated")
    return datetime.fromisoformat(running["startedAt"].replace("Z", "+00:00"))


def test_two_container_pod_runs_with_upstream_statuses(kubelet: KubeletProcess,
                                                       testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("two", [sleeper("a"), sleeper("b")], testbed.busybox_image))
    status = kubelet.wait_for(
        lambda: (s := kubelet.status("two")).get("phase") == "Running"
        and all(c.get("ready") for c in s.get("containerStatuses") or [])
        and len(s["containerStatuses"]) == 2 and s,
        60, "two containers running and ready")
    assert ipaddress.ip_address(status["podIP"]) in POD_SUBNET
    assert status["hostIP"] == "127.0.0.1"
    assert status["qosClass"] == "BestEffort"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"PodReadyToStartContainers": "True", "Initialized": "True",
                          "ContainersReady": "True", "Ready": "True", "PodScheduled": "True"}
    for container in status["containerStatuses"]:
        assert container["containerID"].startswith("containerd://")
        assert container["restartCount"] == 0
        assert container["image"] == testbed.busybox_image
        assert "running" in container["state"]
    pod = kubelet.pod("two")
    assert pod is not None
    annotations = pod["metadata"]["annotations"]
    assert annotations["kubernetes.io/config.source"] == "file"
    assert annotations["kubernetes.io/config.hash"] == pod["metadata"]["uid"]
    # The log files land in the upstream layout.
    log_dir = kubelet.logs_dir / f"default_two-e2e-node_{pod['metadata']['uid']}"
    assert (log_dir / "a" / "0.log").exists()


def test_init_containers_run_in_order_then_the_app(kubelet: KubeletProcess,
                                                   testbed: Testbed) -> None:
    pod = busybox_pod(
        "inits", [sleeper("app")], testbed.busybox_image,
        initContainers=[{"name": "first", "command": ["sh", "-c", "echo first"]},
                        {"name": "second", "command": ["sh", "-c", "sleep 1; echo second"]}])
    kubelet.write_pod(pod)
    kubelet.wait_phase("inits", "Running")
    first = kubelet.container_status("inits", "first", init=True)
    second = kubelet.container_status("inits", "second", init=True)
    assert first["state"]["terminated"]["reason"] == "Completed"
    assert second["state"]["terminated"]["reason"] == "Completed"
    first_end = first["state"]["terminated"]["finishedAt"]
    second_start = second["state"]["terminated"]["startedAt"]
    assert first_end <= second_start
    app = kubelet.wait_for(lambda: kubelet.container_status("inits", "app").get("started"),
                           30, "app started")
    assert app


def test_failing_init_container_fails_a_never_pod(kubelet: KubeletProcess,
                                                  testbed: Testbed) -> None:
    pod = busybox_pod("badinit", [sleeper("app")], testbed.busybox_image, restartPolicy="Never",
                      initContainers=[{"name": "init", "command": ["sh", "-c", "exit 3"]}])
    kubelet.write_pod(pod)
    status = kubelet.wait_phase("badinit", "Failed")
    init = kubelet.container_status("badinit", "init", init=True)
    assert init["state"]["terminated"]["exitCode"] == 3
    app = kubelet.container_status("badinit", "app")
    assert "running" not in app.get("state", {})
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Initialized"] == "False"


@pytest.mark.parametrize(("policy", "exit_code", "phase", "restarts"), [
    ("Never", 0, "Succeeded", False),
    ("Never", 1, "Failed", False),
    ("OnFailure", 0, "Succeeded", False),
    ("OnFailure", 1, "Running", True),
    ("Always", 0, "Running", True),
    ("Always", 1, "Running", True),
])
def test_restart_policy_gives_upstream_phase_and_restarts(
        kubelet: KubeletProcess, testbed: Testbed, policy: str, exit_code: int, phase: str,
        restarts: bool) -> None:
    name = f"rp-{policy.lower()}-{exit_code}"
    kubelet.write_pod(busybox_pod(name, [{"name": "c", "command": ["sh", "-c",
                                                               f"sleep 1; exit {exit_code}"]}],
                                  testbed.busybox_image, restartPolicy=policy))
    if restarts:
        container = kubelet.wait_for(
            lambda: (c := kubelet.container_status(name, "c")).get("restartCount", 0) >= 1 and c,
            60, f"{name} restarted")
        assert kubelet.status(name)["phase"] == phase
        assert container["lastState"]["terminated"]["exitCode"] == exit_code
    else:
        kubelet.wait_phase(name, phase)
        time.sleep(3)  # long enough for a wrong restart to show
        container = kubelet.container_status(name, "c")
        assert container["restartCount"] == 0
        assert container["state"]["terminated"]["exitCode"] == exit_code
        assert container["state"]["terminated"]["reason"] == ("Completed" if exit_code == 0
                                                               else "Error")
        assert kubelet.status(name)["phase"] == phase


def test_crash_loop_back_off_with_growing_delays(kubelet: KubeletProcess,
                                                 testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("crashy", [{"name": "c", "command": ["sh", "-c", "exit 1"]}],
                                  testbed.busybox_image))
    waiting = kubelet.wait_for(
        lambda: kubelet.container_status("crashy", "c").get("state", {}).get("waiting", {})
        .get("reason") == "CrashLoopBackOff" and kubelet.container_status("crashy", "c"),
        60, "CrashLoopBackOff")
    assert "back-off" in waiting["state"]["waiting"]["message"]
    # Record when each restart happens: the gaps must grow (10 s, then 20 s).
    seen: dict[int, float] = {}

    def restarts_seen() -> bool:
        count = kubelet.container_status("crashy", "c").get("restartCount", 0)
        seen.setdefault(count, time.monotonic())
        return count >= 3

    kubelet.wait_for(restarts_seen, 90, "three restarts")
    counts = sorted(seen)
    gaps = [seen[b] - seen[a] for a, b in itertools.pairwise(counts) if b == a + 1]
    assert gaps, seen
    assert max(gaps) >= 15, f"back-off did not grow: {gaps}"


def test_editing_a_manifest_replaces_the_pod(kubelet: KubeletProcess, testbed: Testbed) -> None:
    manifest = busybox_pod("edit", [sleeper("keep"), sleeper("change")], testbed.busybox_image)
    kubelet.write_pod(manifest)
    kubelet.wait_phase("edit", "Running")
    old_uid = kubelet.pod("edit")["metadata"]["uid"]  # type: ignore[index]
    manifest["spec"]["containers"][1]["command"] = ["sh", "-c", "sleep 7200"]
    kubelet.write_pod(manifest)
    new = kubelet.wait_for(
        lambda: (p := kubelet.pod("edit")) and p["metadata"]["uid"] != old_uid
        and (p.get("status") or {}).get("phase") == "Running" and p, 60, "edited pod running")
    commands = {c["name"]: c["command"] for c in new["spec"]["containers"]}
    assert commands["change"] == ["sh", "-c", "sleep 7200"]
    # Upstream static pod identity: the edit changed the UID, so the old pod's
    # containers are stopped and no longer run.
    kubelet.wait_for(lambda: not any(
        c.state == 1 and c.labels.get("io.kubernetes.pod.uid") == old_uid
        for c in runtime_view(kubelet.endpoint)["containers"]), 60, "old containers stopped")


def test_removing_the_file_stops_and_removes_everything(kubelet: KubeletProcess,
                                                        testbed: Testbed) -> None:
    path = kubelet.write_pod(busybox_pod("gone", [sleeper("c")], testbed.busybox_image,
                                         terminationGracePeriodSeconds=2))
    kubelet.wait_phase("gone", "Running")
    uid = kubelet.pod("gone")["metadata"]["uid"]  # type: ignore[index]
    assert (kubelet.root / "pods" / uid).is_dir()
    path.unlink()

    def all_gone() -> bool:
        view = runtime_view(kubelet.endpoint)
        mine = [s for s in view["sandboxes"] if s.metadata.uid == uid]
        pod_dir = kubelet.root / "pods" / uid
        return not mine and kubelet.pod("gone") is None and not pod_dir.exists()

    # The pod is stopped at once; its sandbox goes once the pod's content may be removed
    # (the deletor after housekeeping, see kuberuntime/gc.py), at the latest at the
    # container GC's next pass (every minute, as upstream's ContainerGCPeriod), which
    # the deadline still allows for.
    kubelet.wait_for(lambda: not any(
        c.state == 1 and c.labels.get("io.kubernetes.pod.uid") == uid
        for c in runtime_view(kubelet.endpoint)["containers"]), 30, "container stopped")
    kubelet.wait_for(all_gone, CONTAINER_GC_PERIOD + 30, "pod, sandbox and directory removed")


def test_a_pod_past_its_active_deadline_is_failed_and_its_containers_stopped(
        kubelet: KubeletProcess, testbed: Testbed) -> None:
    # restartPolicy is Always (the default): the deadline ends the pod all the same.
    kubelet.write_pod(busybox_pod("deadline", [sleeper("c")], testbed.busybox_image,
                                  activeDeadlineSeconds=3, terminationGracePeriodSeconds=2))
    status = kubelet.wait_phase("deadline", "Failed", timeout=30)
    failed_seen = datetime.now(UTC)
    assert status["reason"] == "DeadlineExceeded"
    assert status["message"] == "Pod was active on the node longer than the specified deadline"
    # Counted from the pod's startTime, and acted on by the sync tick within seconds.
    active = (failed_seen - datetime.fromisoformat(status["startTime"].replace("Z", "+00:00")))
    assert 3 <= active.total_seconds() <= 15, active
    uid = kubelet.pod("deadline")["metadata"]["uid"]  # type: ignore[index]
    kubelet.wait_for(lambda: not any(
        c.state == 1 and c.labels.get("io.kubernetes.pod.uid") == uid
        for c in runtime_view(kubelet.endpoint)["containers"]), 30, "containers stopped")
    container = kubelet.wait_for(
        lambda: "terminated" in (c := kubelet.container_status("deadline", "c"))["state"] and c,
        30, "container reported terminated")
    assert container["restartCount"] == 0
    final = kubelet.status("deadline")
    assert (final["phase"], final["reason"]) == ("Failed", "DeadlineExceeded")
    events = kubelet.events("DeadlineExceeded")
    assert events and all('type="Normal"' in line for line in events)


def test_bad_manifest_beside_good_ones(kubelet: KubeletProcess, testbed: Testbed) -> None:
    (kubelet.manifests / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: [\n")
    kubelet.write_pod(busybox_pod("noimage", [{"name": "c"}], ""), "noimage.yaml")
    kubelet.write_pod(busybox_pod("fine", [sleeper("c")], testbed.busybox_image))
    kubelet.wait_phase("fine", "Running")
    names = {p["metadata"]["name"] for p in kubelet.pods()}
    assert names == {"fine-e2e-node"}
    log = kubelet.log_text()
    assert "broken.yaml" in log
    assert "noimage.yaml" in log


def test_sidecar_keeps_running_while_app_starts(kubelet: KubeletProcess,
                                                testbed: Testbed) -> None:
    pod = busybox_pod("sidecar", [sleeper("app")], testbed.busybox_image,
                      initContainers=[{"name": "proxy", "restartPolicy": "Always",
                                       "command": ["sh", "-c", "sleep 3600"]}])
    kubelet.write_pod(pod)
    kubelet.wait_for(lambda: kubelet.container_status("sidecar", "app").get("started"), 60,
                     "app started")
    proxy = kubelet.container_status("sidecar", "proxy", init=True)
    assert "running" in proxy["state"]
    assert kubelet.status("sidecar")["phase"] == "Running"


def test_restart_adopts_running_pods(testbed: Testbed, tmp_path: Path) -> None:
    first = KubeletProcess(tmp_path, testbed.endpoint)
    first.start()
    try:
        first.write_pod(busybox_pod("adopt", [sleeper("c")], testbed.busybox_image))
        before = first.wait_for(
            lambda: (c := first.container_status("adopt", "c")).get("ready") and c, 60, "ready")
        first.stop(signal.SIGKILL)
        second = KubeletProcess(tmp_path, testbed.endpoint,
                                ports=(first.read_only_port, first.healthz_port))
        second.start()
        try:
            after = second.wait_for(
                lambda: (c := second.container_status("adopt", "c")).get("ready") and c, 60,
                "adopted")
            time.sleep(3)
            after = second.container_status("adopt", "c")
            assert after["containerID"] == before["containerID"]
            assert after["restartCount"] == before["restartCount"] == 0
        finally:
            second.stop()
    finally:
        first.stop()
        remove_everything(testbed.endpoint)


def test_survives_containerd_outage(kubelet: KubeletProcess, testbed: Testbed) -> None:
    kubelet.write_pod(busybox_pod("outage", [sleeper("c")], testbed.busybox_image))
    before = kubelet.wait_for(
        lambda: (c := kubelet.container_status("outage", "c")).get("ready") and c, 60, "ready")
    testbed.stop_daemon()
    try:
        time.sleep(8)
        assert kubelet.process is not None and kubelet.process.poll() is None
    finally:
        testbed.start_daemon()
    kubelet.write_pod(busybox_pod("after", [sleeper("c")], testbed.busybox_image))
    kubelet.wait_phase("after", "Running", timeout=90)
    assert kubelet.container_status("outage", "c")["containerID"] == before["containerID"]


def test_sigterm_stops_the_kubelet_but_not_the_pods(testbed: Testbed, tmp_path: Path) -> None:
    process = KubeletProcess(tmp_path, testbed.endpoint)
    process.start()
    try:
        process.write_pod(busybox_pod("stay", [sleeper("c")], testbed.busybox_image))
        status = process.wait_for(
            lambda: (c := process.container_status("stay", "c")).get("ready") and c, 60, "ready")
        assert process.stop(signal.SIGTERM) == 0
        container_id = status["containerID"].split("://", 1)[1]
        running = [c for c in runtime_view(testbed.endpoint)["containers"]
                   if c.id == container_id and c.state == 1]
        assert running, "the pod's container should still run after the kubelet stops"
    finally:
        process.stop()
        remove_everything(testbed.endpoint)


def test_restart_cleans_up_pods_whose_manifest_went_away(testbed: Testbed,
                                                         tmp_path: Path) -> None:
    first = KubeletProcess(tmp_path, testbed.endpoint)
    first.start()
    try:
        keep = first.write_pod(busybox_pod("keep", [sleeper("c")], testbed.busybox_image))
        gone = first.write_pod(busybox_pod("orphan", [sleeper("c")], testbed.busybox_image,
                                           terminationGracePeriodSeconds=2))
        first.wait_phase("keep", "Running")
        first.wait_phase("orphan", "Running")
        orphan_uid = first.pod("orphan")["metadata"]["uid"]  # type: ignore[index]
        first.stop(signal.SIGKILL)
        gone.unlink()
        assert keep.exists()
        second = KubeletProcess(tmp_path, testbed.endpoint,
                                ports=(first.read_only_port, first.healthz_port))
        second.start()
        try:
            second.wait_for(lambda: not [s for s in runtime_view(testbed.endpoint)["sandboxes"]
                                         if s.metadata.uid == orphan_uid],
                            CONTAINER_GC_PERIOD + 30, "orphaned pod removed from the runtime")
            assert second.status("keep")["phase"] == "Running"
            assert second.container_status("keep", "c")["restartCount"] == 0
        finally:
            second.stop()
    finally:
        first.stop()
        remove_everything(testbed.endpoint)


def test_admission_rejects_pods_beyond_max_pods(testbed: Testbed, tmp_path: Path) -> None:
    kubelet = KubeletProcess(tmp_path, testbed.endpoint, extra_config={"maxPods": 2})
    kubelet.start()
    try:
        for name in ("one", "two"):
            kubelet.write_pod(busybox_pod(name, [sleeper("c")], testbed.busybox_image))
            kubelet.wait_phase(name, "Running")
        kubelet.write_pod(busybox_pod("three", [sleeper("c")], testbed.busybox_image))
        status = kubelet.wait_phase("three", "Failed")
        assert status["reason"] == "OutOfpods"
        assert "pods" in status["message"]
        time.sleep(5)  # several housekeeping rounds: the rejected pod must stay rejected
        uid = kubelet.pod("three")["metadata"]["uid"]  # type: ignore[index]
        assert not [s for s in runtime_view(testbed.endpoint)["sandboxes"]
                    if s.metadata.uid == uid]
        assert kubelet.status("three")["phase"] == "Failed"
    finally:
        kubelet.stop()
        remove_everything(testbed.endpoint)


def test_pods_from_a_manifest_url(testbed: Testbed, tmp_path: Path) -> None:
    """``staticPodURL`` serving a PodList, with the ``staticPodURLHeader`` it requires."""
    pod_list = {"apiVersion": "v1", "kind": "PodList", "items": [
        busybox_pod("from-url", [sleeper("c")], testbed.busybox_image)]}

    class Manifests(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("X-Token") != "let-me-in":
                self.send_response(403)
                self.end_headers()
                return
            body = json.dumps(pod_list).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Manifests)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/pods"
    kubelet = KubeletProcess(tmp_path, testbed.endpoint, extra_config={
        "staticPodURL": url, "staticPodURLHeader": {"X-Token": ["let-me-in"]},
        "httpCheckFrequency": "2s"})
    kubelet.start()
    try:
        kubelet.wait_phase("from-url", "Running")
        pod = kubelet.pod("from-url")
        assert pod is not None
        assert pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "http"
        pod_list["items"] = []
        kubelet.wait_for(lambda: kubelet.pod("from-url") is None, 30, "pod removed from the URL")
    finally:
        kubelet.stop()
        server.shutdown()
        remove_everything(testbed.endpoint)


def test_host_port_reaches_the_container(kubelet: KubeletProcess, testbed: Testbed) -> None:
    host_port = free_port()
    kubelet.write_pod(busybox_pod("hostport", [{
        "name": "web", "command": ["sh", "-c", "mkdir -p /www && echo served-by-pod > "
                                   "/www/index.html && exec httpd -f -p 8080 -h /www"],
        "ports": [{"containerPort": 8080, "hostPort": host_port}]}], testbed.busybox_image))
    kubelet.wait_phase("hostport", "Running")

    def fetch() -> str:
        with urllib.request.urlopen(f"http://{node_address()}:{host_port}/", timeout=2) as reply:
            return str(reply.read().decode())

    assert "served-by-pod" in kubelet.wait_for(fetch, 30, "page through the host port")


def test_host_ip_env_is_the_node_ip_from_the_first_start(kubelet: KubeletProcess,
                                                         testbed: Testbed) -> None:
    """Upstream's e2e "should provide host IP as an env var": the first start of a pod,
    before any status of it says its hostIP, already has the node's IP."""
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    kubelet.write_pod(busybox_pod("hostip", [{
        "name": "app", "command": ["sh", "-c", "echo HOST_IP=$HOST_IP HOST_IPS=$HOST_IPS; "
                                               "echo DONE; sleep 3600"],
        "env": [field("HOST_IP", "status.hostIP"), field("HOST_IPS", "status.hostIPs")]}],
        testbed.busybox_image))
    text = wait_log(kubelet, "hostip", "app", "DONE")
    assert "HOST_IP=127.0.0.1 HOST_IPS=127.0.0.1" in text.splitlines()  # --node-ip
    assert kubelet.status("hostip")["hostIP"] == "127.0.0.1"


def test_hostile_manifests_leave_good_pods_running_and_healthz_answering(
        tmp_path: Path, testbed: Testbed) -> None:
    """Hostile files beside good ones: the good pods keep running and probing, and healthz
    answers within a second throughout, across several periodic re-reads of the directory."""
    kubelet = KubeletProcess(tmp_path, testbed.endpoint, extra_config={"fileCheckFrequency": "2s"})
    kubelet.start()
    try:
        probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
        kubelet.write_pod(busybox_pod("steady", [{**sleeper("c"), "readinessProbe": probe}],
                                      testbed.busybox_image))
        kubelet.write_pod(busybox_pod("other", [sleeper("c")], testbed.busybox_image))
        for name in ("steady", "other"):
            kubelet.wait_for(lambda name=name: kubelet.container_status(name, "c").get("ready"),
                             60, f"{name} ready")

        for name, data in hostile_manifests().items():
            (kubelet.manifests / name).write_bytes(data)
        worst = 0.0
        deadline = time.monotonic() + 15
        round_ = 0
        while time.monotonic() < deadline:
            round_ += 1
            if round_ % 10 == 0:  # new content defeats the decoded-failure cache
                (kubelet.manifests / "heavy-but-bad.yaml").write_bytes(
                    f"# {round_}\n".encode() + hostile_manifests()["heavy-but-bad.yaml"])
            started = time.monotonic()
            answer = kubelet.healthz()
            took = time.monotonic() - started
            worst = max(worst, took)
            assert answer == "ok" and took < 1.0, (answer, took)
            time.sleep(0.1)
        print(f"healthz: worst answer {worst * 1000:.0f} ms over {round_} requests")

        for name in ("steady", "other"):
            status = kubelet.container_status(name, "c")
            assert status.get("ready") and status["restartCount"] == 0, status
        assert {p["metadata"]["name"] for p in kubelet.pods()} == {
            "steady-e2e-node", "other-e2e-node"}
        assert refused_manifests_missing_from(kubelet.log_text().splitlines()) == []
    finally:
        kubelet.stop()
        remove_everything(testbed.endpoint)
