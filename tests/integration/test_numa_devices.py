"""Devices on a two-NUMA-node machine under ``topologyManagerPolicy: single-numa-node``.

A real pykubelet and the testbed's containerd, with a real device plugin that says
where its devices sit (testsupport/topology_device_plugin.py: Allocate hands the
container ``NUMA_DEVICE=<device>``, which each container prints). The machine is
this one with its NUMA nodes faked in the kubelet's mount namespace only
(``write_numa_nodes``): CPU 0 on node 0, CPU 1 on node 1.

What a user would notice: each device fits a single NUMA node, so every pod asking
for one runs as long as one is free, whichever node it sits on; and a pod that
completed gives its device back to the next pod once the kubelet has stopped it, as
upstream frees terminated pods' devices before it computes hints.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from testsupport import topology_device_plugin
from testsupport.kubelet_process import (
    SYS_NODE_DIR,
    KubeletProcess,
    busybox_pod,
    numa_node_mounts,
    remove_everything,
    write_numa_nodes,
)
from testsupport.testbed import Testbed
from testsupport.topology_device_plugin import DEVICE_ENV, TopologyDevicePlugin

pytestmark = [
    pytest.mark.containerd,
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs CPUs 0 and 1"),
    pytest.mark.skipif(not SYS_NODE_DIR.is_dir(), reason=f"no {SYS_NODE_DIR} to cover"),
]

RESOURCE = topology_device_plugin.RESOURCE_NAME
CONFIG = {"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "container",
          "cpuManagerPolicy": "none"}
# What the kubelet logs when it refuses a pod, and the topology manager's reason.
ADMISSION_LOGS = ("Pod admission denied", "TopologyAffinityError")
ADMISSION_LOG_LINES = 20
SETTLE_TIMEOUT_SECONDS = 60.0
PRINT_TIMEOUT_SECONDS = 30.0
# The pod worker's line (upstream's wording) once a pod's containers are all stopped: only
# then is a completed pod inactive, and only inactive pods' devices are freed (upstream too:
# a pod still terminating keeps its devices).
TERMINATED_LOG = "Pod terminated all containers successfully"
# Each container prints the device the plugin handed out, then stays up (holding it) or exits.
HOLD = f"echo device ${DEVICE_ENV}; sleep 3600"
PRINT_AND_EXIT = f"echo device ${DEVICE_ENV}"


class TwoNumaNodeKubelet(KubeletProcess):
    """A kubelet that sees CPU 0 on NUMA node 0 and CPU 1 on NUMA node 1."""

    def extra_mounts(self) -> list[str]:
        return numa_node_mounts(write_numa_nodes(self.base / "numa-nodes", ["0", "1"]))


@contextlib.contextmanager
def node_with_devices(testbed: Testbed, tmp_path: Path, devices: Mapping[str, int]
                      ) -> Iterator[KubeletProcess]:
    """A started two-NUMA-node kubelet that has listed the plugin's ``devices`` (ID -> NUMA
    node); the kubelet and the plugin stopped, and the testbed's pods removed, afterwards."""
    node = TwoNumaNodeKubelet(tmp_path, testbed.endpoint, extra_config=CONFIG)
    node.start()
    plugin: TopologyDevicePlugin | None = None
    try:
        plugin = topology_device_plugin.start(node, devices=devices)
        plugin.wait_registered()
        yield node
    finally:
        if plugin is not None:
            plugin.stop()
        node.stop()
        remove_everything(testbed.endpoint)


def device_pod(name: str, image: str, *, command: str, **spec: Any) -> dict[str, Any]:
    wanted = {RESOURCE: "1"}
    return busybox_pod(name, [{"name": "c", "command": ["sh", "-c", command],
                               "resources": {"requests": wanted, "limits": wanted}}],
                       image, **spec)


def admission_log(node: KubeletProcess) -> str:
    lines = [line for line in node.log_text().splitlines()
             if any(text in line for text in ADMISSION_LOGS)]
    return "\n".join(lines[-ADMISSION_LOG_LINES:]) or "(nothing about admission)"


def wait_admitted(node: KubeletProcess, name: str, phase: str) -> dict[str, Any]:
    """Until pod ``name`` reached ``phase`` or was refused; asserts the former, showing the
    kubelet's admission log lines when it was refused."""
    status: dict[str, Any] = node.wait_for(
        lambda: (s := node.status(name)).get("phase") in (phase, "Failed") and s,
        SETTLE_TIMEOUT_SECONDS, f"pod {name} {phase} or refused")
    assert status["phase"] == phase, (
        f"pod {name} is {status['phase']} ({status.get('reason')}: {status.get('message')}), "
        f"not {phase}; the kubelet's admission log:\n{admission_log(node)}")
    return status


def wait_terminated(node: KubeletProcess, name: str) -> None:
    """Until the kubelet has stopped everything of pod ``name`` (its pod worker says so)."""
    pod = node.pod(name)
    assert pod is not None
    line = f'{TERMINATED_LOG}" podUID="{pod["metadata"]["uid"]}"'
    node.wait_for(lambda: line in node.log_text(), SETTLE_TIMEOUT_SECONDS,
                  f"the kubelet to finish pod {name}")


def device_printed(node: KubeletProcess, name: str) -> str:
    """The device pod ``name``'s container printed (waits for it)."""
    pattern = f"default_{name}-{node.node_name}_*/c/*.log"

    def printed() -> str | None:
        for path in sorted(node.logs_dir.glob(pattern)):
            for line in path.read_text().splitlines():
                if " device " in line:
                    return line.rsplit(" ", 1)[-1]
        return None

    return str(node.wait_for(printed, PRINT_TIMEOUT_SECONDS, f"the device pod {name} printed"))


def test_pods_get_the_device_on_either_numa_node(testbed: Testbed, tmp_path: Path) -> None:
    devices = {"numa0-dev": 0, "numa1-dev": 1}
    with node_with_devices(testbed, tmp_path, devices) as node:
        image = testbed.busybox_image
        # One after the other: whichever the first gets, the second gets the other node's.
        node.write_pod(device_pod("a", image, command=HOLD))
        wait_admitted(node, "a", "Running")
        node.write_pod(device_pod("b", image, command=HOLD))
        wait_admitted(node, "b", "Running")
        assert {device_printed(node, "a"), device_printed(node, "b")} == set(devices)


def test_a_completed_pods_device_goes_to_the_next_pod(testbed: Testbed,
                                                      tmp_path: Path) -> None:
    # Both on node 0: each pod fits one node whatever it gets; only the devices are scarce.
    devices = {"numa0-dev-a": 0, "numa0-dev-b": 0}
    with node_with_devices(testbed, tmp_path, devices) as node:
        image = testbed.busybox_image
        node.write_pod(device_pod("d", image, command=HOLD))
        wait_admitted(node, "d", "Running")
        node.write_pod(device_pod("c", image, command=PRINT_AND_EXIT, restartPolicy="Never"))
        wait_admitted(node, "c", "Succeeded")
        held, freed = device_printed(node, "d"), device_printed(node, "c")
        assert {held, freed} == set(devices)
        wait_terminated(node, "c")

        # The completed pod holds nothing any more: its device is the one left to run on.
        node.write_pod(device_pod("e", image, command=HOLD))
        wait_admitted(node, "e", "Running")
        assert device_printed(node, "e") == freed
        assert node.status("d")["phase"] == "Running"
