"""A device plugin that registers through ``<root-dir>/plugins_registry``, end to end: a
real pykubelet, the testbed's containerd and upstream's 1.20 sample device plugin.

The situation after a node is swapped from the Go kubelet 1.20 to pykubelet
(testsupport/swap.py): the 1.20 kubelet left ``DEPRECATION`` in the device-plugin
directory, so the plugin does not call Register on ``kubelet.sock``; it serves its
socket in the kubelet's ``plugins_registry`` and waits to be found. What a user would
notice: the node lists the plugin's devices (the pod-resources API's allocatable
devices, a standalone node having no Node object) and a pod asking for one runs with
its device file mounted.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pykubelet.api.proto import podresources_v1_pb2 as podresources
from pykubelet.api.proto import podresources_v1_pb2_grpc as podresources_grpc
from tests.integration.test_device_plugins import device_pod, devices_seen
from testsupport import device_plugin
from testsupport.kubelet_process import KubeletProcess, remove_everything
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd,
              pytest.mark.skipif(device_plugin.missing_reason() is not None,
                                 reason=f"{device_plugin.missing_reason()}")]

RESOURCE = device_plugin.RESOURCE_NAME
# What the Go kubelet 1.20 leaves in the device-plugin directory.
DEPRECATION = "DEPRECATION"
# What pykubelet logs once the plugin manager has registered a plugin.
REGISTERED_LOG = "Plugin registered"


class SwappedNodeKubelet(KubeletProcess):
    """A pykubelet on a node where the Go kubelet 1.20 ran: ``DEPRECATION`` is in its
    device-plugin directory (written by the test, as the old kubelet left it), so the
    sample plugin serves its socket in the kubelet's ``plugins_registry``."""

    device_plugin_deprecation = True


@pytest.fixture
def base() -> Iterator[Path]:
    # The plugin's socket path is <base>/root/plugins_registry/dp.<unix time>: it must fit
    # a Unix socket address (108 bytes), which pytest's tmp_path may not.
    made = Path(tempfile.mkdtemp(prefix="pw", dir="/tmp"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def allocatable_devices(node: KubeletProcess) -> list[tuple[str, list[str]]]:
    """The devices the node offers, as a monitoring agent reads them."""
    socket = node.root / "pod-resources" / "kubelet.sock"
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        answer = podresources_grpc.PodResourcesListerStub(channel).GetAllocatableResources(
            podresources.AllocatableResourcesRequest(), timeout=10)
    return sorted((d.resource_name, sorted(d.device_ids)) for d in answer.devices)


def test_a_device_plugin_found_in_plugins_registry_gives_the_node_its_devices(
        testbed: Testbed, base: Path) -> None:
    node = SwappedNodeKubelet(base, testbed.endpoint, node_name="pw-node")
    (node.device_plugin_dir / DEPRECATION).write_text("")
    node.start()
    plugin = device_plugin.start(node)
    try:
        plugin.wait_registered()
        # Found by the plugin watcher in plugins_registry, not registered on kubelet.sock.
        registered = [line for line in node.log_text().splitlines() if REGISTERED_LOG in line]
        assert len(registered) == 1
        assert f"{node.root / 'plugins_registry'}/dp." in registered[0]
        assert "Got registration request from device plugin" not in node.log_text()

        node.wait_for(lambda: allocatable_devices(node) == [(RESOURCE, ["Dev-1"]),
                                                             (RESOURCE, ["Dev-2"])],
                      30, f"the node to offer {RESOURCE} Dev-1 and Dev-2")

        node.write_pod(device_pod("one", testbed.busybox_image, 1))
        node.wait_phase("one", "Running")
        seen = node.wait_for(lambda: devices_seen(node, "one"), 30, "pod one's devices")
        assert len(seen) == 1 and seen[0] in ("/tmp/Dev-1", "/tmp/Dev-2")
    finally:
        plugin.stop()
        node.stop()
        remove_everything(testbed.endpoint)
