"""The node status setters: conditions and their events, capacity, addresses, images."""

from __future__ import annotations

import datetime
from fractions import Fraction

import pytest
from kubernetes_asyncio.client import (
    V1Node,
    V1NodeAddress,
    V1NodeCondition,
    V1NodeStatus,
    V1ObjectMeta,
)

from pykubelet.nodestatus import setters as s
from pykubelet.nodestatus.machine import MachineInfo, VersionInfo
from pykubelet.nodestatus.resources import MachineResources

GIB = 1024**3
T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)


class Health:
    def __init__(self, runtime: list[str] | None = None, network: list[str] | None = None):
        self.runtime = runtime or []
        self.network = network or []

    def runtime_errors(self) -> list[str]:
        return list(self.runtime)

    def network_errors(self) -> list[str]:
        return list(self.network)


class Pressure(s.NoPressure):
    memory = False

    def is_under_memory_pressure(self) -> bool:
        return self.memory


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now


def node() -> V1Node:
    return V1Node(metadata=V1ObjectMeta(name="n1"), status=V1NodeStatus(
        capacity={"cpu": "2", "memory": "1Gi", "pods": "110", "ephemeral-storage": "10Gi"}))


def conditions(n: V1Node) -> dict[str, V1NodeCondition]:
    return {c.type: c for c in n.status.conditions}


async def test_ready_follows_runtime_health_and_records_transitions() -> None:
    events: list[tuple[str, str]] = []
    clock, health, n = Clock(), Health(runtime=["container runtime is down"]), node()
    ready = s.ready_condition(clock, health, lambda t, r: events.append((t, r)))

    await ready(n)
    first = conditions(n)["Ready"]
    assert (first.status, first.reason, first.message) == (
        "False", "KubeletNotReady", "container runtime is down")
    assert events == []  # a new condition is no transition

    health.runtime = []
    clock.now = T0 + datetime.timedelta(seconds=5)
    await ready(n)
    up = conditions(n)["Ready"]
    assert (up.status, up.reason, up.message) == ("True", "KubeletReady",
                                                  "kubelet is posting ready status")
    assert up.last_transition_time == clock.now
    assert events == [("Normal", "NodeReady")]

    clock.now = T0 + datetime.timedelta(seconds=15)
    await ready(n)
    again = conditions(n)["Ready"]
    assert again.last_heartbeat_time == clock.now
    assert again.last_transition_time == T0 + datetime.timedelta(seconds=5)
    assert events == [("Normal", "NodeReady")]

    health.network = ["container runtime network not ready: cni plugin not initialized"]
    await ready(n)
    assert conditions(n)["Ready"].status == "False"
    assert events[-1] == ("Normal", "NodeNotReady")
    assert n.status.conditions[-1].type == "Ready"


async def test_ready_message_aggregates_like_upstream() -> None:
    n = node()
    n.status.capacity.pop("ephemeral-storage")
    health = Health(runtime=["a", "b", "a"])
    await s.ready_condition(Clock(), health, lambda t, r: None)(n)
    assert conditions(n)["Ready"].message == (
        "[a, b, missing node capacity for resources: ephemeral-storage]")


async def test_pressure_conditions_start_false_with_events() -> None:
    events: list[tuple[str, str]] = []
    clock, pressure, n = Clock(), Pressure(), node()
    record = lambda t, r: events.append((t, r))  # noqa: E731
    for setter in (s.memory_pressure_condition(clock, pressure, record),
                   s.disk_pressure_condition(clock, pressure, record),
                   s.pid_pressure_condition(clock, pressure, record)):
        await setter(n)
    found = conditions(n)
    assert [(c.type, c.status, c.reason) for c in n.status.conditions] == [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
    ]
    assert found["MemoryPressure"].message == "kubelet has sufficient memory available"
    assert [r for _, r in events] == ["NodeHasSufficientMemory", "NodeHasNoDiskPressure",
                                      "NodeHasSufficientPID"]
    pressure.memory = True
    await s.memory_pressure_condition(clock, pressure, record)(n)
    assert conditions(n)["MemoryPressure"].reason == "KubeletHasInsufficientMemory"
    assert events[-1] == ("Normal", "NodeHasInsufficientMemory")


async def test_machine_info_capacity_allocatable_and_reboot() -> None:
    events: list[tuple[str, str, str]] = []
    machine = MachineInfo(num_cores=2, memory_capacity=8 * GIB, hugepages={2 * 1024**2: 256},
                          machine_id="m", boot_id="boot-2")
    # The container manager's reservation: 500m systemReserved cpu, 100Mi hard eviction.
    resources = MachineResources(
        machine, 50 * GIB, lambda: {"cpu": Fraction(1, 2), "memory": Fraction(100 * 2**20)})
    n = node()
    n.status.node_info = None
    n.status.capacity = {"example.com/dongle": "3"}
    await s.machine_info("n1", 110, 0, machine, resources,
                         lambda *e: events.append(e))(n)
    assert n.status.capacity == {"example.com/dongle": "3", "cpu": "2", "memory": "8Gi",
                                 "hugepages-2Mi": "512Mi", "pods": "110",
                                 "ephemeral-storage": "50Gi"}
    assert n.status.allocatable["cpu"] == "1500m"
    # 8Gi - 100Mi eviction - 512Mi of huge pages
    assert n.status.allocatable["memory"] == "7580Mi"
    assert n.status.node_info.boot_id == "boot-2"
    assert events == []
    n.status.node_info.boot_id = "boot-1"
    await s.machine_info("n1", 110, 0, machine, resources, lambda *e: events.append(e))(n)
    assert events == [("Warning", "Rebooted", "Node n1 has been rebooted, boot id: boot-2")]


async def test_pods_per_core_caps_pods() -> None:
    machine = MachineInfo(num_cores=2, memory_capacity=GIB)
    n = node()
    await s.machine_info("n1", 110, 10, machine, MachineResources(machine, None),
                         lambda *e: None)(n)
    assert n.status.capacity["pods"] == "20"


async def test_images_biggest_first_capped() -> None:
    async def listing() -> list[s.Image]:
        return [s.Image(("a@sha256:1", "a:1"), 10), s.Image(tuple(f"b:{i}" for i in range(7)), 30),
                s.Image(("c:1",), 20)]

    n = node()
    await s.images(2, listing)(n)
    assert [(i.names, i.size_bytes) for i in n.status.images] == [
        ([f"b:{i}" for i in range(5)], 30), (["c:1"], 20)]
    await s.images(-1, listing)(n)
    assert len(n.status.images) == 3


async def test_version_info_and_platform() -> None:
    async def runtime() -> tuple[str, str]:
        return "containerd", "1.6.20"

    n = node()
    await s.version_info(VersionInfo("6.1.0", "Debian GNU/Linux 12 (bookworm)"), runtime)(n)
    await s.go_runtime()(n)
    info = n.status.node_info
    assert info.container_runtime_version == "containerd://1.6.20"
    assert info.kubelet_version.startswith("v1.")
    assert (info.operating_system, info.kernel_version) == ("linux", "6.1.0")
    assert info.architecture


async def test_addresses_from_node_ip_and_hostname() -> None:
    address = s.default_route_address()
    if address is None:
        pytest.skip("this machine has no default route")
    n = node()
    await s.node_address([address], "host-a")(n)
    assert [(a.type, a.address) for a in n.status.addresses] == [
        ("InternalIP", address), ("Hostname", "host-a")]


async def test_a_node_ip_that_is_not_ours_is_refused() -> None:
    with pytest.raises(ValueError, match="not found in the host's network interfaces"):
        await s.node_address(["203.0.113.77"], "host-a")(node())
    with pytest.raises(ValueError, match="loopback"):
        await s.node_address(["127.0.0.1"], "host-a")(node())


async def test_hostname_that_is_an_ip_is_the_internal_ip() -> None:
    n = node()
    await s.node_address([], "192.0.2.10")(n)
    assert n.status.addresses[0].address == "192.0.2.10"


# -- with --cloud-provider=external ------------------------------------------------------

PROVIDED = "alpha.kubernetes.io/provided-node-ip"


@pytest.fixture
def any_node_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Documentation addresses pass as this host's own (the check is tested above)."""
    monkeypatch.setattr(s, "validate_node_ip", lambda address: None)


def pairs(n: V1Node) -> list[tuple[str, str]]:
    return [(a.type, a.address) for a in n.status.addresses]


@pytest.mark.usefixtures("any_node_ip")
async def test_external_provider_gets_the_node_ip_annotation_and_first_addresses() -> None:
    n = node()
    await s.node_address(["192.0.2.10"], "host-a", external_cloud_provider=True)(n)
    assert n.metadata.annotations == {PROVIDED: "192.0.2.10"}
    # Nothing set them yet: the kubelet's own, until the cloud controller manager's.
    assert pairs(n) == [("InternalIP", "192.0.2.10"), ("Hostname", "host-a")]

    dual = node()
    await s.node_address(["192.0.2.10", "2001:db8::10"], "host-a",
                         external_cloud_provider=True)(dual)
    assert dual.metadata.annotations == {PROVIDED: "192.0.2.10,2001:db8::10"}
    assert pairs(dual) == [("InternalIP", "192.0.2.10"), ("InternalIP", "2001:db8::10"),
                           ("Hostname", "host-a")]


@pytest.mark.usefixtures("any_node_ip")
async def test_external_provider_leaves_addresses_the_node_has_alone() -> None:
    n = node()
    n.metadata.annotations = {"team": "blue"}
    from_cloud = [V1NodeAddress(type="InternalIP", address="10.0.0.5"),
                  V1NodeAddress(type="ExternalIP", address="198.51.100.7"),
                  V1NodeAddress(type="Hostname", address="vm-1234")]
    n.status.addresses = list(from_cloud)
    await s.node_address(["192.0.2.10"], "host-a", external_cloud_provider=True)(n)
    assert n.status.addresses == from_cloud
    assert n.metadata.annotations == {"team": "blue", PROVIDED: "192.0.2.10"}

    # Without an external provider the kubelet's addresses replace them, as always.
    await s.node_address(["192.0.2.10"], "host-a")(n)
    assert pairs(n) == [("InternalIP", "192.0.2.10"), ("Hostname", "host-a")]


async def test_external_provider_without_node_ip_waits_for_the_cloud_addresses() -> None:
    n = node()
    await s.node_address([], "host-a", external_cloud_provider=True)(n)
    # No guessed InternalIP: only the Hostname, until the cloud controller manager's.
    assert pairs(n) == [("Hostname", "host-a")]
    assert not n.metadata.annotations


@pytest.mark.usefixtures("any_node_ip")
async def test_the_annotation_goes_when_no_longer_asked_for() -> None:
    n = node()
    n.metadata.annotations = {PROVIDED: "192.0.2.10", "team": "blue"}
    await s.node_address([], "host-a", external_cloud_provider=True)(n)
    assert n.metadata.annotations == {"team": "blue"}  # external, but no --node-ip

    n.metadata.annotations = {PROVIDED: "192.0.2.10"}
    await s.node_address(["192.0.2.10"], "host-a")(n)
    assert not n.metadata.annotations  # --node-ip, but no external provider


async def test_a_bad_node_ip_fails_before_anything_is_written() -> None:
    n = node()
    n.metadata.annotations = {PROVIDED: "192.0.2.99"}
    with pytest.raises(ValueError, match="loopback"):
        await s.node_address(["127.0.0.1"], "host-a", external_cloud_provider=True)(n)
    assert n.metadata.annotations == {PROVIDED: "192.0.2.99"}
    assert n.status.addresses is None
