"""pykubelet as a cluster node, against the real control plane and the real containerd.

Everything is checked the way a user would check it: ``kubectl get nodes``,
``kubectl get lease``, ``kubectl delete node``, the kubelet's own log. The
node authenticates as ``system:node:<name>``, so the Node authorizer and the
NodeRestriction admission plugin judge every request; no test may see one
refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import math
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubelet.nodestatus.setters import default_route_address
from testsupport.cluster import (
    ClusterKubelet,
    api_pod,
    condition,
    create,
    get_pod,
    is_ready,
    kubectl_get_nodes,
    parse_time,
    unique,
    unique_node_name,
)
from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import busybox_pod, free_port, remove_everything
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]

MI = 1024**2
GI = 1024**3
# From a healthy kubelet (HTTP up, runtime answering) to Ready in kubectl.
READY_WITHIN_SECONDS = 10.0


class Kubelets:
    """Starts cluster kubelets for one test; stops them, deletes their Nodes afterwards."""

    def __init__(self, testbed: Testbed, plane: ControlPlane, tmp_path: Path) -> None:
        self.testbed = testbed
        self.plane = plane
        self.tmp_path = tmp_path
        self.started: list[ClusterKubelet] = []

    def new(self, node_name: str | None = None, *, kubeconfig: Path | None = None,
            credentials: bool = True, **kwargs: Any) -> ClusterKubelet:
        name = node_name or unique_node_name()
        if kubeconfig is None and credentials:
            kubeconfig = self.plane.node_kubeconfig(name)
        base = self.tmp_path / f"{name}-{len(self.started)}"
        kubelet = ClusterKubelet(base, self.testbed.endpoint, self.plane, name,
                                 kubeconfig=kubeconfig, **kwargs)
        self.started.append(kubelet)
        return kubelet

    def close(self) -> None:
        for kubelet in self.started:
            kubelet.stop()
            kubelet.delete_node()
        remove_everything(self.testbed.endpoint)


@pytest.fixture
def kubelets(testbed: Testbed, control_plane: ControlPlane, tmp_path: Path
             ) -> Iterator[Kubelets]:
    started = Kubelets(testbed, control_plane, tmp_path)
    try:
        yield started
    finally:
        started.close()


# -- what the machine has, read independently of pykubelet ----------------------------------

def online_cpus() -> int:
    text = Path("/sys/devices/system/cpu/online").read_text().strip()
    total = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        total += int(high) - int(low) + 1 if high else 1
    return total


def mem_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def quantity_bytes(text: str) -> int:
    units = {"Ki": 1024, "Mi": MI, "Gi": GI, "Ti": 1024 * GI}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text[:-2]) * factor
    return int(text)


def own_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Taints other than the node lifecycle controller's (``node.kubernetes.io/not-ready``...)."""
    return [t for t in node["spec"].get("taints") or []
            if not t["key"].startswith("node.kubernetes.io/")]


def millicores(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(text) * 1000


# -- tests ------------------------------------------------------------------------------------

def test_node_registers_and_is_ready_within_seconds(kubelets: Kubelets) -> None:
    kubelet = kubelets.new(
        extra_config={
            "systemReserved": {"cpu": "100m", "memory": "256Mi"},
            "kubeReserved": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "1Gi"},
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
            "maxPods": 42,
        },
        extra_args=["--node-labels=pykubelet.example/tier=edge,node.kubernetes.io/pool=py",
                    "--register-with-taints=dedicated=pykubelet:NoSchedule"])
    kubelet.start()
    healthy = time.monotonic()
    node = kubelet.wait_ready(timeout=60)
    took = time.monotonic() - healthy
    assert took < READY_WITHIN_SECONDS, f"Ready {took:.1f}s after the kubelet was healthy"

    listing = kubectl_get_nodes(kubelet.plane)
    row = next(line for line in listing.splitlines() if line.startswith(kubelet.node_name))
    assert row.split()[1] == "Ready", listing

    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == kubelet.node_name
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] in ("amd64", "arm64")
    assert labels["pykubelet.example/tier"] == "edge"
    assert labels["node.kubernetes.io/pool"] == "py"
    assert own_taints(node) == [
        {"key": "dedicated", "value": "pykubelet", "effect": "NoSchedule"}]

    status = node["status"]
    capacity, allocatable = status["capacity"], status["allocatable"]
    cpus, memory = online_cpus(), mem_total_bytes()
    stats = os.statvfs(kubelet.root)
    disk = stats.f_blocks * stats.f_frsize
    assert millicores(capacity["cpu"]) == cpus * 1000
    assert quantity_bytes(capacity["memory"]) == memory
    assert capacity["pods"] == "42"
    assert quantity_bytes(capacity["ephemeral-storage"]) == disk
    assert millicores(allocatable["cpu"]) == cpus * 1000 - 200
    hugepages = sum(quantity_bytes(v) for k, v in capacity.items() if k.startswith("hugepages-"))
    assert quantity_bytes(allocatable["memory"]) == memory - (256 + 128 + 100) * MI - hugepages
    # nodefs.available 10% is held back as upstream computes it (a float32 percentage).
    ten_percent = struct.unpack("f", struct.pack("f", 0.1))[0]
    assert quantity_bytes(allocatable["ephemeral-storage"]) == (
        disk - GI - math.trunc(disk * ten_percent))

    info = status["nodeInfo"]
    assert info["bootID"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert info["machineID"] == Path("/etc/machine-id").read_text().strip()
    assert info["kernelVersion"] == os.uname().release
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert info["kubeletVersion"].startswith("v1.")
    assert info["operatingSystem"] == "linux"
    assert info["architecture"] == labels["kubernetes.io/arch"]
    assert info["osImage"]

    addresses = {a["type"]: a["address"] for a in status["addresses"]}
    assert addresses["Hostname"] == kubelet.node_name
    assert not ipaddress.ip_address(addresses["InternalIP"]).is_loopback
    # The configured `port` (capital P in the API).
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == kubelet.port
    names = [name for image in status.get("images") or [] for name in image["names"]]
    assert any("busybox" in name for name in names), names

    for kind, reason in (("MemoryPressure", "KubeletHasSufficientMemory"),
                         ("DiskPressure", "KubeletHasNoDiskPressure"),
                         ("PIDPressure", "KubeletHasSufficientPID"),
                         ("Ready", "KubeletReady")):
        found = condition(node, kind)
        assert found["reason"] == reason
        assert found["status"] == ("True" if kind == "Ready" else "False")
    assert [c["type"] for c in status["conditions"]][-1] == "Ready"
    # (NodeReady is recorded only when Ready changes, and a node whose runtime is
    # up before it registers is created Ready.)
    for reason in ("Starting", "NodeHasSufficientMemory", "NodeHasNoDiskPressure",
                   "NodeHasSufficientPID"):
        assert kubelet.events(reason), f"no {reason} event in the log"
    assert kubelet.forbidden_lines() == []


def test_status_is_written_only_when_it_changes(kubelets: Kubelets) -> None:
    kubelet = kubelets.new()
    kubelet.start()
    kubelet.wait_ready(timeout=60)
    first = kubelet.node()
    assert first is not None
    time.sleep(8)  # four nodeStatusUpdateFrequency periods
    later = kubelet.node()
    assert later is not None
    # Nothing changed, so nothing was written: the heartbeat did not move (the lease beats).
    for kind in ("Ready", "MemoryPressure"):
        assert (condition(later, kind)["lastHeartbeatTime"]
                == condition(first, kind)["lastHeartbeatTime"])


def test_lease_is_renewed_and_owned_by_the_node(kubelets: Kubelets) -> None:
    kubelet = kubelets.new(extra_config={"nodeLeaseDurationSeconds": 8})
    kubelet.start()
    node = kubelet.wait_ready(timeout=60)
    lease = wait_until(kubelet.lease, 30, "the node lease")
    spec = lease["spec"]
    assert spec["holderIdentity"] == kubelet.node_name
    assert spec["leaseDurationSeconds"] == 8
    assert lease["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Node", "name": kubelet.node_name,
        "uid": node["metadata"]["uid"]}]
    first = parse_time(spec["renewTime"])
    # Renewed every 8 / 4 = 2 seconds.
    renewed = wait_until(lambda: (got := kubelet.lease())
                   and parse_time(got["spec"]["renewTime"]) > first and got,
                   10, "a lease renewal")
    gap = (parse_time(renewed["spec"]["renewTime"]) - first).total_seconds()
    assert 1.0 <= gap <= 6.0
    assert kubelet.forbidden_lines() == []


def test_deleted_node_is_registered_again(kubelets: Kubelets) -> None:
    kubelet = kubelets.new(extra_config={"nodeLeaseDurationSeconds": 8})
    kubelet.start()
    old = kubelet.wait_ready(timeout=60)
    old_uid = old["metadata"]["uid"]
    kubelet.plane.kubectl("delete", "node", kubelet.node_name)
    again = wait_until(lambda: (n := kubelet.node()) and n["metadata"]["uid"] != old_uid and n,
                 30, "the node registered again")
    assert again["metadata"]["labels"]["kubernetes.io/hostname"] == kubelet.node_name
    kubelet.wait_ready(timeout=30)
    # The old lease went with the old Node; the new one is owned by the new Node.
    wait_until(lambda: (got := kubelet.lease())
         and got["metadata"].get("ownerReferences", [{}])[0].get("uid")
         == again["metadata"]["uid"], 60, "a lease owned by the new Node")
    assert kubelet.forbidden_lines() == []


def test_restart_reconciles_default_labels_and_keeps_the_rest(kubelets: Kubelets) -> None:
    name = unique_node_name()
    first = kubelets.new(name, extra_args=["--register-with-taints=first=yes:NoSchedule"])
    first.start()
    first.wait_ready(timeout=60)
    first.stop()
    plane = first.plane
    plane.kubectl("label", "node", name, "team=blue", "kubernetes.io/hostname=stale",
                  "--overwrite")
    plane.kubectl("taint", "node", name, "maintenance=yes:PreferNoSchedule")

    second = kubelets.new(name, extra_args=["--node-labels=pykubelet.example/late=yes",
                                            "--register-with-taints=second=yes:NoSchedule"])
    second.start()
    node = wait_until(lambda: (n := second.node())
                and n["metadata"]["labels"].get("kubernetes.io/hostname") == name and n,
                30, "the hostname label reconciled")
    labels = node["metadata"]["labels"]
    assert labels["team"] == "blue"
    assert "pykubelet.example/late" not in labels  # --node-labels apply at creation only
    assert sorted(t["key"] for t in own_taints(node)) == ["first", "maintenance"]
    second.wait_ready(timeout=30)
    assert second.forbidden_lines() == []


UNINITIALIZED_TAINT = {"key": "node.cloudprovider.kubernetes.io/uninitialized",
                       "value": "true", "effect": "NoSchedule"}
PROVIDED_NODE_IP = "alpha.kubernetes.io/provided-node-ip"


def scheduled_pod(name: str, node_name: str, image: str, **spec: Any) -> dict[str, Any]:
    """A pod the scheduler places (no ``nodeName``), on ``node_name`` only."""
    manifest = api_pod(name, node_name, image, **spec)
    del manifest["spec"]["nodeName"]
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    return manifest


def heartbeat(node: dict[str, Any]) -> datetime.datetime:
    return parse_time(condition(node, "Ready")["lastHeartbeatTime"])


def act_as_cloud_controller(plane: ControlPlane, node_name: str,
                            addresses: list[dict[str, str]]) -> datetime.datetime:
    """What a cloud controller manager does to a new Node: its addresses, then the taint off.

    Returns the Node's last status heartbeat before the change.
    """
    before: list[datetime.datetime] = []

    def replace_addresses() -> bool:
        node = json.loads(plane.kubectl("get", "node", node_name, "-o", "json").stdout)
        node["status"]["addresses"] = addresses
        replaced = plane.kubectl("replace", "--raw", f"/api/v1/nodes/{node_name}/status",
                                 "-f", "-", input=json.dumps(node), check=False)
        before.append(heartbeat(node))
        return replaced.returncode == 0  # else a kubelet write came between: again

    wait_until(replace_addresses, 30, "the Node's addresses replaced")
    plane.kubectl("taint", "node", node_name, f"{UNINITIALIZED_TAINT['key']}-")
    return before[-1]


def test_external_cloud_provider_node_waits_tainted_for_the_cloud_controller(
        kubelets: Kubelets) -> None:
    node_ip = default_route_address()
    if node_ip is None:
        pytest.skip("this machine has no default route")
    plane, image = kubelets.plane, kubelets.testbed.busybox_image
    # A status write every 4 s even without a change, to see what a write leaves.
    kubelet = kubelets.new(extra_config={"nodeStatusReportFrequency": "4s"},
                           extra_args=["--cloud-provider=external", f"--node-ip={node_ip}"])
    name = kubelet.node_name
    kubelet.start()
    node = kubelet.wait_ready(timeout=60)
    assert own_taints(node) == [UNINITIALIZED_TAINT]
    assert node["metadata"]["annotations"][PROVIDED_NODE_IP] == node_ip
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": node_ip},
                                           {"type": "Hostname", "address": name}]

    tolerant, plain = unique("tolerant"), unique("plain")
    # The ServiceAccount admission plugin needs the namespace's default account.
    wait_until(lambda: plane.kubectl("get", "serviceaccount", "default",
                                     check=False).returncode == 0,
               60, "the default service account")
    try:
        create(plane, scheduled_pod(tolerant, name, image, tolerations=[
            {"key": UNINITIALIZED_TAINT["key"], "operator": "Equal", "value": "true",
             "effect": "NoSchedule"}]))
        create(plane, scheduled_pod(plain, name, image))

        def phase(pod_name: str) -> str | None:
            return ((get_pod(plane, pod_name) or {}).get("status") or {}).get("phase")

        def log_tail() -> str:
            return f"kubelet log tail:\n{kubelet.log_text()[-4000:]}"

        wait_until(lambda: phase(tolerant) == "Running", 90, f"pod {tolerant} Running",
                   on_timeout=log_tail)
        assert (get_pod(plane, tolerant) or {})["spec"]["nodeName"] == name

        def unschedulable() -> dict[str, Any] | None:
            pod = get_pod(plane, plain) or {}
            found = next((c for c in (pod.get("status") or {}).get("conditions") or []
                          if c["type"] == "PodScheduled"), None)
            return found if found and found.get("reason") == "Unschedulable" else None

        refused = wait_until(unschedulable, 60, f"pod {plain} found unschedulable")
        assert UNINITIALIZED_TAINT["key"] in refused["message"]
        pod = get_pod(plane, plain) or {}
        assert pod["status"]["phase"] == "Pending"
        assert "nodeName" not in pod["spec"]

        cloud_addresses = [{"type": "InternalIP", "address": node_ip},
                           {"type": "ExternalIP", "address": "198.51.100.7"},
                           {"type": "Hostname", "address": name}]
        changed_after = act_as_cloud_controller(plane, name, cloud_addresses)
        wait_until(lambda: phase(plain) == "Running", 90,
                   f"pod {plain} Running once the Node is initialized", on_timeout=log_tail)
        # The kubelet writes its status again and leaves the cloud's addresses alone;
        # the taint it registered with does not come back.
        later = wait_until(lambda: (n := kubelet.node()) and heartbeat(n) > changed_after and n,
                           30, "a status write after the cloud controller's")
        assert later["status"]["addresses"] == cloud_addresses
        assert own_taints(later) == []
        assert later["metadata"]["annotations"][PROVIDED_NODE_IP] == node_ip
        assert kubelet.forbidden_lines() == []
    finally:
        plane.kubectl("delete", "pod", tolerant, plain, "--ignore-not-found", "--wait=false",
                      check=False)


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such.kubeconfig"
    result = subprocess.run(
        [sys.executable, "-m", "pykubelet", "--kubeconfig", str(missing),
         "--root-dir", str(tmp_path / "root"), "--container-runtime-endpoint",
         f"unix://{tmp_path}/none.sock"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert f"invalid kubeconfig {missing}: no such file" in result.stderr


def test_unreachable_server_is_named_and_static_pods_run(kubelets: Kubelets,
                                                         control_plane: ControlPlane,
                                                         tmp_path: Path) -> None:
    port = free_port()
    document = yaml.safe_load(control_plane.admin_kubeconfig.read_text())
    document["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    kubeconfig = tmp_path / "unreachable.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(document))
    kubelet = kubelets.new(kubeconfig=kubeconfig)
    kubelet.write_pod(busybox_pod("alone", [{"name": "c", "command": ["sleep", "3600"]}],
                                  kubelets.testbed.busybox_image))
    kubelet.start()
    kubelet.wait_phase("alone", "Running", timeout=60)
    line = kubelet.wait_for(
        lambda: next((text for text in kubelet.log_text().splitlines()
                      if "The API server cannot be reached" in text), None), 30, "the error")
    assert f"https://127.0.0.1:{port}" in line
    assert str(kubeconfig) in line
    assert kubelet.healthz() == "ok"


class TcpProxy:
    """A TCP relay to the API server that a test can cut and restore (an outage)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.thread.start()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def start(self) -> None:
        async def listen() -> None:
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                     reuse_address=True)
        self._call(listen())

    def cut(self) -> None:
        async def close() -> None:
            assert self.server is not None
            self.server.close()
            for writer in list(self.writers):
                writer.transport.abort()
            self.writers.clear()
        self._call(close())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cut()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_api_server_outage_pods_keep_running_status_catches_up(
        kubelets: Kubelets, tmp_path: Path) -> None:
    plane = kubelets.plane
    proxy = TcpProxy(int(plane.env["APISERVER_PORT"]))
    proxy.start()
    try:
        name = unique_node_name()
        document = yaml.safe_load(plane.node_kubeconfig(name).read_text())
        document["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        kubeconfig = tmp_path / "proxied.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(document))
        kubelet = kubelets.new(name, kubeconfig=kubeconfig,
                               extra_config={"nodeLeaseDurationSeconds": 8})
        kubelet.write_pod(busybox_pod("steady", [{"name": "c", "command": ["sleep", "3600"]}],
                                      kubelets.testbed.busybox_image))
        kubelet.start()
        kubelet.wait_ready(timeout=60)
        kubelet.wait_phase("steady", "Running", timeout=60)
        wait_until(kubelet.lease, 30, "the node lease")
        container = kubelet.container_status("steady", "c")["containerID"]

        proxy.cut()
        cut_at = time.time()
        time.sleep(15)
        # Pods keep running through the outage; the kubelet stays healthy.
        assert kubelet.healthz() == "ok"
        assert kubelet.container_status("steady", "c")["containerID"] == container
        assert kubelet.status("steady")["phase"] == "Running"
        assert "Failed to update lease" in kubelet.log_text()  # and retried with back-off

        proxy.start()
        renewed = wait_until(lambda: (got := kubelet.lease())
                       and parse_time(got["spec"]["renewTime"]).timestamp() > cut_at + 15
                       and got, 40, "the lease renewed after the outage")
        assert renewed["spec"]["holderIdentity"] == name
        assert is_ready(kubelet.wait_ready(timeout=30))
        assert kubelet.forbidden_lines() == []
    finally:
        proxy.close()
