"""Resource management end to end: a real pykubelet, the testbed's containerd, the host's cgroups.

What a user sees: the QoS cgroup tree with each pod's limits in the cgroup
files, the OOM killer reported as ``OOMKilled``, dead containers cleaned up,
container logs rotated, and start-up refusing configurations that cannot work.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.cri.logfile import read_log_lines
from testsupport.kubelet_process import (
    KubeletProcess,
    busybox_pod,
    masked_command,
    running_kubelet,
    runtime_view,
    write_kernel_tunables,
)
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

CGROUP = Path("/sys/fs/cgroup")
MiB = 2**20


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["sh", "-c", script], **extra}


def resources(requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if requests:
        body["requests"] = requests
    if limits:
        body["limits"] = limits
    return {"resources": body}


@pytest.fixture
def node(testbed: Testbed, tmp_path: Path) -> Iterator[KubeletProcess]:
    with running_kubelet(tmp_path, testbed.endpoint, extra_config={
            "podPidsLimit": 100, "systemReserved": {"memory": "512Mi"},
            "containerLogMaxSize": "64Ki", "containerLogMaxFiles": 3,
            "containerLogMonitorInterval": "3s"}) as process:
        yield process


def read(controller: str, cgroup: str, name: str) -> str:
    return (CGROUP / controller / cgroup.lstrip("/") / name).read_text().strip()


def uid_of(node: KubeletProcess, name: str) -> str:
    pod = node.pod(name)
    assert pod is not None
    return str(pod["metadata"]["uid"])


def test_qos_classes_land_in_their_cgroups_with_their_limits(node: KubeletProcess,
                                                             testbed: Testbed) -> None:
    image = testbed.busybox_image
    node.write_pod(busybox_pod("guaranteed", [{**sh("c", "sleep 3600"), **resources(
        {"cpu": "250m", "memory": "64Mi"}, {"cpu": "250m", "memory": "64Mi"})}], image))
    node.write_pod(busybox_pod("burstable", [{**sh("c", "sleep 3600"), **resources(
        {"cpu": "100m", "memory": "32Mi"}, {"memory": "128Mi"})}], image))
    node.write_pod(busybox_pod("besteffort", [sh("c", "sleep 3600")], image))
    for name in ("guaranteed", "burstable", "besteffort"):
        node.wait_phase(name, "Running")
    kubepods = f"{node.cgroup_root}/kubepods"
    assert node.status("guaranteed")["qosClass"] == "Guaranteed"

    guaranteed = f"{kubepods}/pod{uid_of(node, 'guaranteed')}"
    assert read("cpu", guaranteed, "cpu.shares") == "256"
    assert read("cpu", guaranteed, "cpu.cfs_quota_us") == "25000"
    assert read("memory", guaranteed, "memory.limit_in_bytes") == str(64 * MiB)
    assert read("pids", guaranteed, "pids.max") == "100"
    burstable = f"{kubepods}/burstable/pod{uid_of(node, 'burstable')}"
    assert read("cpu", burstable, "cpu.shares") == "102"
    assert read("cpu", burstable, "cpu.cfs_quota_us") == "-1"  # no cpu limit
    assert read("memory", burstable, "memory.limit_in_bytes") == str(128 * MiB)
    besteffort = f"{kubepods}/besteffort/pod{uid_of(node, 'besteffort')}"
    assert read("cpu", besteffort, "cpu.shares") == "2"

    # The containers run inside their pod's cgroup (the sandbox's cgroup parent).
    for pod_cgroup in (guaranteed, burstable, besteffort):
        children = [p for p in (CGROUP / "memory" / pod_cgroup.lstrip("/")).iterdir()
                    if p.is_dir()]
        assert len(children) == 2, children  # the pause container and "c"
    # The QoS cgroups follow their pods, and kubepods is held to node allocatable.
    assert read("cpu", f"{kubepods}/burstable", "cpu.shares") == "102"
    assert read("cpu", f"{kubepods}/besteffort", "cpu.shares") == "2"
    mem_total = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text()
                         .splitlines() if line.startswith("MemTotal:"))) * 1024
    assert int(read("memory", kubepods, "memory.limit_in_bytes")) == (
        (mem_total - 512 * MiB) // 4096 * 4096)

    # A removed pod's cgroup goes once the pod is gone.
    (node.manifests / "burstable.yaml").unlink()
    node.wait_for(lambda: not (CGROUP / "cpu" / burstable.lstrip("/")).exists(), 60,
                  "the burstable pod's cgroup removed")
    assert (CGROUP / "cpu" / guaranteed.lstrip("/")).exists()


def test_a_container_over_its_memory_limit_is_oom_killed(node: KubeletProcess,
                                                         testbed: Testbed) -> None:
    # A shell variable of 64 MiB in a container limited to 24 MiB.
    hog = "x=$(head -c 67108864 /dev/zero | tr '\\0' x); sleep 3600"
    node.write_pod(busybox_pod("hog", [{**sh("hog", hog), **resources(
        {"memory": "24Mi"}, {"memory": "24Mi"})}], testbed.busybox_image,
        restartPolicy="Never"))
    status = node.wait_for(
        lambda: (s := node.status("hog")).get("phase") == "Failed" and s, 60,
        "the memory hog to fail")
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled"
    assert terminated["exitCode"] == 137


def test_dead_containers_beyond_one_per_container_are_removed(node: KubeletProcess,
                                                              testbed: Testbed) -> None:
    node.write_pod(busybox_pod("crasher", [sh("crash", "exit 3")], testbed.busybox_image))
    node.wait_for(lambda: node.container_status("crasher", "crash").get("restartCount", 0) >= 3,
                  120, "three restarts")
    uid = uid_of(node, "crasher")

    def dead_instances() -> int:
        containers = runtime_view(node.endpoint)["containers"]
        return sum(1 for c in containers if c.labels.get("io.kubernetes.pod.uid") == uid
                   and c.state != 1)  # not CONTAINER_RUNNING

    # Each death removes the older dead instances: at most the newest one and the one
    # that just died (not yet cleaned) are left.
    node.wait_for(lambda: dead_instances() <= 2, 30, "older dead instances removed")
    assert dead_instances() <= 2


def test_a_fast_writer_has_its_log_rotated_and_still_readable(node: KubeletProcess,
                                                              testbed: Testbed) -> None:
    script = ("i=0; while true; do i=$((i+1)); echo \"line $i "
              "0123456789012345678901234567890123456789\"; done")
    node.write_pod(busybox_pod("chatty", [sh("talk", script)], testbed.busybox_image))
    node.wait_phase("chatty", "Running")
    log_dir = node.logs_dir / f"default_chatty-e2e-node_{uid_of(node, 'chatty')}" / "talk"

    def rotated() -> list[str]:
        return sorted(p.name for p in log_dir.iterdir() if p.name != "0.log")

    node.wait_for(lambda: any(n.endswith(".gz") for n in rotated()), 60,
                  "a rotated and compressed log")
    for _ in range(3):
        names = rotated()
        # With the current file, never more than containerLogMaxFiles (3).
        assert len(names) <= 2, names
        lines = read_log_lines(log_dir / "0.log", tail_lines=5)
        # The last record may be caught half written (the talker never pauses): every
        # record before it is whole.
        assert len(lines) >= 2 and all(line.content.startswith(b"line ")
                                       for line in lines[:-1]), lines
        node.wait_for(lambda before=names: rotated() != before, 30, "another rotation")
    # Rotation keeps the file near its limit instead of growing without bound: the
    # writer produces megabytes between passes; a pass cuts it back every 3 s.
    assert sum((log_dir / n).stat().st_size for n in rotated() if n.endswith(".gz")) < 50 * MiB


def run_pykubelet(tmp_path: Path, config: dict[str, Any], endpoint: str
                  ) -> subprocess.CompletedProcess[str]:
    import yaml
    path = tmp_path / "kubelet.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1",
                                    "kind": "KubeletConfiguration", "readOnlyPort": 0,
                                    "healthzPort": 0, "containerRuntimeEndpoint": endpoint,
                                    "podLogsDir": str(tmp_path / "logs"),
                                    # Standalone: a config file defaults to webhook authn/authz,
                                    # which needs a kubeconfig this test does not give.
                                    "authentication": {"webhook": {"enabled": False},
                                                       "anonymous": {"enabled": True}},
                                    "authorization": {"mode": "AlwaysAllow"}, **config}))
    # Its kernel tunables masked, as every test kubelet's, should it get as far as them.
    command = masked_command(
        [sys.executable, "-m", "pykubelet", "--config", str(path), "--root-dir",
         str(tmp_path / "root")], tunables=write_kernel_tunables(tmp_path / "kernel-tunables"))
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ})


@pytest.mark.parametrize(("config", "expected"), [
    ({}, "kubelet is configured to not run on a host using cgroup v1"),
    ({"failCgroupV1": False, "cgroupDriver": "systemd"},
     "cgroupDriver: kubelet is configured with cgroupDriver 'systemd' but the container "
     "runtime uses 'cgroupfs'"),
    ({"failCgroupV1": False, "systemReserved": {"memory": "1Ei"}},
     "invalid Node Allocatable configuration (systemReserved + kubeReserved + evictionHard "
     "exceed the node's capacity)"),
    ({"failCgroupV1": False, "cgroupRoot": "/pykubelet-no-such-root"},
     "cgroupRoot '/pykubelet-no-such-root' does not exist"),
    ({"failCgroupV1": False, "evictionHard": {"memory.available": "lots"}}, "evictionHard"),
])
def test_start_up_refuses_what_cannot_work(tmp_path: Path, testbed: Testbed,
                                           config: dict[str, Any], expected: str) -> None:
    result = run_pykubelet(tmp_path, config, testbed.endpoint)
    assert result.returncode == 1
    assert expected in result.stderr, result.stderr[-3000:]


def test_start_up_warns_that_cgroup_v1_is_in_maintenance_mode(node: KubeletProcess) -> None:
    assert "cgroup v1 support is in maintenance mode, please migrate to cgroup v2" in (
        node.log_text())


def test_a_pod_whose_cgroup_cannot_be_created_fails_alone(node: KubeletProcess,
                                                          testbed: Testbed) -> None:
    image = testbed.busybox_image
    node.write_pod(busybox_pod("steady", [sh("c", "sleep 3600")], image))
    node.wait_phase("steady", "Running")
    # Someone removes the (empty) Burstable QoS cgroup behind the kubelet's back.
    burstable = f"{node.cgroup_root}/kubepods/burstable"
    for controller in sorted(p.name for p in CGROUP.iterdir()):
        target = CGROUP / controller / burstable.lstrip("/")
        if target.is_dir():
            target.rmdir()
    node.write_pod(busybox_pod("unlucky", [{**sh("c", "sleep 3600"), **resources(
        {"cpu": "10m"})}], image))
    status = node.wait_for(
        lambda: (s := node.status("unlucky")).get("reason") == "FailedToCreatePodContainer"
        and s, 60, "the pod to report its cgroup failure")
    assert status["message"].startswith("unable to ensure pod container exists: ")
    assert status["phase"] == "Pending"
    # The kubelet and the other pod carry on.
    assert node.healthz() == "ok"
    assert node.status("steady")["phase"] == "Running"
