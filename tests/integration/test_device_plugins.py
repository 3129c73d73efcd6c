"""Device plugins end to end: a real pykubelet, the testbed's containerd, and upstream's
sample device plugin (``example.com/resource``: ``Dev-1`` and ``Dev-2``; its Allocate
mounts ``/tmp/<device>`` into the container), none of it a double.

What a user would notice: a pod asking for one device runs with its device file
mounted; a pod asking for more than the node has is refused with upstream's
``UnexpectedAdmissionError``; once the plugin is gone no new pod gets a device;
and across a kubelet restart the running pod keeps its device, the restarted
plugin registers again, and the other device is the only one left to hand out. A
monitoring agent reading the pod-resources API learns which pod holds which device and
which exclusive CPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import grpc
import pytest

from pykubelet.api.proto import podresources_v1_pb2 as podresources
from pykubelet.api.proto import podresources_v1_pb2_grpc as podresources_grpc
from testsupport import device_plugin
from testsupport.cluster import start_cluster_kubelet
from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import KubeletProcess, busybox_pod, remove_everything
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd,
              pytest.mark.skipif(device_plugin.missing_reason() is not None,
                                 reason=f"{device_plugin.missing_reason()}")]

RESOURCE = device_plugin.RESOURCE_NAME
CHECKPOINT = "kubelet_internal_checkpoint"
# What the kubelet logs when a plugin's device stream ends.
GONE_LOG = "Endpoint became unhealthy"
# Each container prints which of the plugin's device files it sees, then stays up.
SHOW_DEVICES = ("for d in /tmp/Dev-1 /tmp/Dev-2; do [ -e $d ] && echo device $d; done; "
                "echo listed; sleep 3600")


def device_pod(name: str, image: str, count: int) -> dict[str, Any]:
    wanted = {RESOURCE: str(count)}
    return busybox_pod(name, [{"name": "c", "command": ["sh", "-c", SHOW_DEVICES],
                               "resources": {"requests": wanted, "limits": wanted}}], image)


def devices_seen(node: KubeletProcess, name: str) -> list[str] | None:
    """The device files the pod's container printed (None until it has printed them)."""
    pattern = f"default_{name}-{node.node_name}_*/c/*.log"
    lines = [line for path in sorted(node.logs_dir.glob(pattern))
             for line in path.read_text().splitlines()]
    if not any(line.endswith("listed") for line in lines):
        return None
    return sorted(line.rsplit(" ", 1)[-1] for line in lines if " device /tmp/" in line)


def checkpoint_entries(node: KubeletProcess) -> dict[str, list[str]]:
    """Pod UID -> the devices the checkpoint records for it."""
    document = json.loads((node.device_plugin_dir / CHECKPOINT).read_text())
    return {entry["PodUID"]: sorted(d for ids in entry["DeviceIDs"].values() for d in ids)
            for entry in document["Data"]["PodDeviceEntries"] or []}


def uid_of(node: KubeletProcess, name: str) -> str:
    pod = node.pod(name)
    assert pod is not None
    return str(pod["metadata"]["uid"])


def test_sample_device_plugin_end_to_end(testbed: Testbed, tmp_path: Path) -> None:
    node = KubeletProcess(tmp_path, testbed.endpoint)
    node.start()
    plugin = device_plugin.start(node)
    try:
        plugin.wait_registered()
        image = testbed.busybox_image

        # One device: the pod runs and sees one of the plugin's device files.
        node.write_pod(device_pod("one", image, 1))
        node.wait_phase("one", "Running")
        seen = node.wait_for(lambda: devices_seen(node, "one"), 30, "pod one's devices")
        assert len(seen) == 1 and seen[0] in ("/tmp/Dev-1", "/tmp/Dev-2")
        first = seen[0].rsplit("/", 1)[-1]
        assert checkpoint_entries(node) == {uid_of(node, "one"): [first]}

        # More than the node has: refused before it starts.
        node.write_pod(device_pod("greedy", image, 3))
        refused = node.wait_phase("greedy", "Failed")
        assert refused["reason"] == "UnexpectedAdmissionError"
        assert refused["message"] == (
            f"Pod was rejected: Allocate failed due to requested number of devices "
            f"unavailable for {RESOURCE}. Requested: 3, Available: 1, which is unexpected")

        # A restart keeps the running pod's device; the plugin registers again.
        container_id = node.container_status("one", "c")["containerID"]
        assert node.stop() == 0
        node.start()
        plugin.restart()
        plugin.wait_registered()
        node.wait_phase("one", "Running")
        assert node.container_status("one", "c")["containerID"] == container_id
        assert checkpoint_entries(node)[uid_of(node, "one")] == [first]
        # Only the other device is left: a pod asking for two is refused, one for one runs.
        node.write_pod(device_pod("two", image, 2))
        assert node.wait_phase("two", "Failed")["reason"] == "UnexpectedAdmissionError"
        node.write_pod(device_pod("other", image, 1))
        node.wait_phase("other", "Running")
        other = node.wait_for(lambda: devices_seen(node, "other"), 30, "pod other's devices")
        assert other != seen and len(other) == 1

        # The plugin dies: its devices are unhealthy at once, so no new pod gets one (and
        # the kubelet says so, rather than that all devices are taken).
        noticed = node.log_text().count(GONE_LOG)
        plugin.kill()
        node.wait_for(lambda: node.log_text().count(GONE_LOG) > noticed, 30,
                      "the kubelet to notice the plugin gone")
        node.write_pod(device_pod("late", image, 1))
        late = node.wait_phase("late", "Failed")
        assert late["reason"] == "UnexpectedAdmissionError"
        assert late["message"] == (
            "Pod was rejected: Allocate failed due to no healthy devices present; cannot "
            f"allocate unhealthy devices {RESOURCE}, which is unexpected")
        # ...while the pods holding devices keep running.
        assert node.status("one")["phase"] == "Running"
        assert node.status("other")["phase"] == "Running"
    finally:
        plugin.stop()
        node.stop()
        remove_everything(testbed.endpoint)


@pytest.mark.controlplane
def test_the_node_shows_the_plugins_devices(testbed: Testbed, control_plane: ControlPlane,
                                            tmp_path: Path) -> None:
    node = start_cluster_kubelet(control_plane, testbed.endpoint, tmp_path)
    plugin = device_plugin.start(node)
    try:
        plugin.wait_registered()

        def resources() -> tuple[str | None, str | None]:
            status = (node.node() or {}).get("status") or {}
            return ((status.get("capacity") or {}).get(RESOURCE),
                    (status.get("allocatable") or {}).get(RESOURCE))

        node.wait_for(lambda: resources() == ("2", "2"), 30,
                      f"the Node's {RESOURCE} capacity and allocatable at 2")
        # The plugin dies: allocatable drops at once, capacity stays for the grace period.
        plugin.kill()
        node.wait_for(lambda: resources() == ("2", "0"), 30,
                      f"the Node's {RESOURCE} allocatable at 0")
    finally:
        plugin.stop()
        node.stop()
        node.delete_node()
        remove_everything(testbed.endpoint)


def pod_resources_client(node: KubeletProcess) -> tuple[grpc.Channel, Any]:
    """A monitoring agent's client: the pod-resources socket under the kubelet's root."""
    channel = grpc.insecure_channel(f"unix://{node.root / 'pod-resources' / 'kubelet.sock'}")
    return channel, podresources_grpc.PodResourcesListerStub(channel)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")
def test_pod_resources_api_tells_which_pod_holds_which_device_and_cpu(
        testbed: Testbed, tmp_path: Path) -> None:
    node = KubeletProcess(tmp_path, testbed.endpoint, extra_config={
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0"})
    node.start()
    plugin = device_plugin.start(node)
    channel, client = pod_resources_client(node)
    try:
        plugin.wait_registered()
        image = testbed.busybox_image
        # Guaranteed with a whole CPU and a device; a second pod with neither.
        wanted = {"cpu": "1", "memory": "32Mi", RESOURCE: "1"}
        node.write_pod(busybox_pod("exclusive", [{
            "name": "c", "command": ["sh", "-c", SHOW_DEVICES],
            "resources": {"requests": wanted, "limits": wanted}}], image))
        node.write_pod(busybox_pod("shared", [{"name": "c", "command": ["sleep", "3600"]}],
                                   image))
        node.wait_phase("exclusive", "Running")
        node.wait_phase("shared", "Running")
        seen = node.wait_for(lambda: devices_seen(node, "exclusive"), 30, "the pod's devices")
        held = seen[0].rsplit("/", 1)[-1]

        listed = client.List(podresources.ListPodResourcesRequest(), timeout=10)
        by_pod = {p.name.rsplit(f"-{node.node_name}", 1)[0]: p for p in listed.pod_resources}
        assert set(by_pod) == {"exclusive", "shared"}
        (exclusive,) = by_pod["exclusive"].containers
        assert [(d.resource_name, list(d.device_ids)) for d in exclusive.devices] == [
            (RESOURCE, [held])]
        assert list(exclusive.cpu_ids) == [1]
        (shared,) = by_pod["shared"].containers
        assert (list(shared.devices), list(shared.cpu_ids)) == ([], [])

        got = client.Get(podresources.GetPodResourcesRequest(
            pod_name=by_pod["exclusive"].name, pod_namespace="default"), timeout=10)
        assert list(got.pod_resources.containers[0].cpu_ids) == [1]

        allocatable = client.GetAllocatableResources(
            podresources.AllocatableResourcesRequest(), timeout=10)
        assert sorted(d for entry in allocatable.devices for d in entry.device_ids) == [
            "Dev-1", "Dev-2"]
        # Every CPU but the reserved one may be given exclusively.
        assert list(allocatable.cpu_ids) == list(range(1, os.cpu_count() or 1))
    finally:
        channel.close()
        plugin.stop()
        node.stop()
        remove_everything(testbed.endpoint)
