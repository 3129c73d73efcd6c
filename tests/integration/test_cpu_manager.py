"""The CPU manager's static policy end to end: a real pykubelet, the testbed's containerd.

On this 2-CPU machine with CPU 0 reserved, a Guaranteed pod asking for one whole
CPU runs on CPU 1 alone (what its processes read in ``/proc/self/status``), every
other container runs on what is left (CPU 0), the checkpoint records both, and a
restarted kubelet keeps them. When the Guaranteed pod goes, its CPU returns to
the shared pool and the running shared containers are moved onto it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from testsupport.kubelet_process import KubeletProcess, busybox_pod, remove_everything
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd,
              pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")]

# Each container prints the CPUs it may run on, once a second.
REPORT_CPUS = "while true; do grep Cpus_allowed_list /proc/self/status; sleep 1; done"


def reporting_pod(name: str, image: str, resources: dict[str, Any]) -> dict[str, Any]:
    return busybox_pod(name, [{"name": "c", "command": ["sh", "-c", REPORT_CPUS],
                               "resources": resources}], image)


def cpus_allowed(node: KubeletProcess, name: str) -> str | None:
    """The latest ``Cpus_allowed_list`` the pod's container printed."""
    pattern = f"default_{name}-{node.node_name}_*/c/*.log"
    lines = [line for path in sorted(node.logs_dir.glob(pattern))
             for line in path.read_text().splitlines() if "Cpus_allowed_list" in line]
    return lines[-1].split("Cpus_allowed_list:", 1)[-1].strip() if lines else None


def state(node: KubeletProcess) -> dict[str, Any]:
    return dict(json.loads((node.root / "cpu_manager_state").read_text()))


def uid_of(node: KubeletProcess, name: str) -> str:
    pod = node.pod(name)
    assert pod is not None
    return str(pod["metadata"]["uid"])


def test_static_policy_gives_a_guaranteed_pod_its_own_cpu(testbed: Testbed,
                                                          tmp_path: Path) -> None:
    node = KubeletProcess(tmp_path, testbed.endpoint, extra_config={
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
        "cpuManagerReconcilePeriod": "1s"})
    node.start()
    try:
        image = testbed.busybox_image
        whole = {"cpu": "1", "memory": "32Mi"}
        node.write_pod(reporting_pod("exclusive", image, {"requests": whole, "limits": whole}))
        node.wait_phase("exclusive", "Running")
        # Burstable without a cpu request: with one CPU reserved the node's allocatable cpu
        # is the one CPU the Guaranteed pod holds, so a cpu request would not be admitted.
        node.write_pod(reporting_pod("shared", image, {"requests": {"memory": "16Mi"}}))
        node.wait_phase("shared", "Running")
        assert node.status("exclusive")["qosClass"] == "Guaranteed"
        node.wait_for(lambda: cpus_allowed(node, "exclusive") == "1", 30, "exclusive on CPU 1")
        node.wait_for(lambda: cpus_allowed(node, "shared") == "0", 30, "shared on CPU 0")

        exclusive, shared = uid_of(node, "exclusive"), uid_of(node, "shared")
        recorded = state(node)
        assert recorded["policyName"] == "static"
        assert recorded["defaultCpuSet"] == "0"
        assert recorded["entries"] == {exclusive: {"c": "1"}}
        assert shared not in recorded["entries"]  # the shared pool is the default set

        # A restart restores the checkpoint: the same assignment, the pods untouched.
        assert node.stop() == 0
        node.start()
        node.wait_phase("exclusive", "Running")
        assert state(node)["entries"] == {exclusive: {"c": "1"}}
        assert uid_of(node, "exclusive") == exclusive
        assert node.container_status("exclusive", "c")["restartCount"] == 0
        assert cpus_allowed(node, "exclusive") == "1"

        # The Guaranteed pod gone, its CPU is shared again, and the reconcile loop moves
        # the running shared container onto it.
        (node.manifests / "exclusive.yaml").unlink()
        node.wait_for(lambda: node.pod("exclusive") is None, 60, "exclusive pod removed")
        node.wait_for(lambda: state(node).get("entries") is None
                      and state(node)["defaultCpuSet"] == "0-1", 30, "CPU 1 released")
        node.wait_for(lambda: cpus_allowed(node, "shared") == "0-1", 30, "shared on 0-1")
    finally:
        node.stop()
        remove_everything(testbed.endpoint)


def test_a_state_file_of_another_policy_stops_the_kubelet(testbed: Testbed,
                                                          tmp_path: Path) -> None:
    node = KubeletProcess(tmp_path, testbed.endpoint, extra_config={
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0"})
    node.root.mkdir(parents=True, exist_ok=True)
    (node.root / "cpu_manager_state").write_text(
        '{"policyName":"none","defaultCpuSet":"","checksum":0}')
    node.launch()
    try:
        wait_until(lambda: not node.running(), 60, "pykubelet to exit")
        log = node.log_text().replace('\\"', '"')
        assert 'configured policy "static" differs from state checkpoint policy "none"' in log
        assert "please drain this node and delete the CPU manager checkpoint file" in log
    finally:
        node.stop()


def test_single_numa_node_topology_manager_admits_what_one_node_holds(
        testbed: Testbed, tmp_path: Path) -> None:
    """This machine is one NUMA node of two CPUs, CPU 0 reserved: one CPU can be had.

    The topology manager runs the CPU manager's hints: a pod asking for one CPU gets
    node 0 and runs on CPU 1; one asking for two finds no NUMA node with two free
    CPUs (its hints are empty), which ``single-numa-node`` refuses, as upstream, with
    ``TopologyAffinityError`` before the CPU manager is asked to allocate anything.
    """
    node = KubeletProcess(tmp_path, testbed.endpoint, extra_config={
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
        "topologyManagerPolicy": "single-numa-node", "memoryManagerPolicy": "None"})
    node.start()
    try:
        image = testbed.busybox_image
        one, two = ({"cpu": cpus, "memory": "32Mi"} for cpus in ("1", "2"))
        node.write_pod(reporting_pod("aligned", image, {"requests": one, "limits": one}))
        node.wait_phase("aligned", "Running")
        node.wait_for(lambda: cpus_allowed(node, "aligned") == "1", 30, "aligned on CPU 1")

        node.write_pod(reporting_pod("too-wide", image, {"requests": two, "limits": two}))
        refused = node.wait_phase("too-wide", "Failed")
        assert refused["reason"] == "TopologyAffinityError"
        assert refused["message"] == ("Pod was rejected: Resources cannot be allocated with "
                                      "Topology locality")
        assert list(state(node)["entries"]) == [uid_of(node, "aligned")]
        # The topology manager's fields and memoryManagerPolicy None are acted on.
        notices = [line for line in node.log_text().splitlines() if "not acted on" in line]
        assert not any("ManagerPolicy" in line for line in notices), notices
    finally:
        node.stop()
        remove_everything(testbed.endpoint)
