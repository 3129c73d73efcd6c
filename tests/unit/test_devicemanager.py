"""The device plugin manager against a fake plugin over real Unix sockets.

What a user would notice: which plugins may register, what the node reports for
their devices (and after a plugin dies), which devices a container gets and what it
is created with, which pods are refused, and that a restart keeps every
assignment (``kubelet_internal_checkpoint``, readable by the Go kubelet).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest
from kubernetes_asyncio.client import V1Node, V1NodeStatus, V1ObjectMeta

from pykubelet import metrics
from pykubelet.api import pod_from_dict
from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.api.proto import deviceplugin_v1beta1_pb2_grpc as pluginapi_grpc
from pykubelet.api.resources import is_extended_resource_name
from pykubelet.cm.devicemanager import CHECKPOINT_NAME, DeviceAllocationError, DeviceManager
from pykubelet.cm.devicemanager.checkpoint import CheckpointData, PodDevicesEntry, checksum
from pykubelet.cm.topologymanager import AffinityStore, new_topology_manager
from pykubelet.cm.topologymanager.bitmask import BitMask
from pykubelet.cm.topologymanager.policy import TopologyHint
from pykubelet.container.devices import DeviceMount, DeviceRunOptions, DeviceSpec
from pykubelet.kuberuntime.container_config import ContainerOptions, generate_container_config
from pykubelet.lifecycle.admission import PodAdmitAttributes
from pykubelet.nodestatus import MachineResources, setters
from pykubelet.nodestatus.machine import MachineInfo
from tests.unit.waiting import until

RESOURCE = "example.com/resource"


class FakePlugin(pluginapi_grpc.DevicePluginServicer):
    """A device plugin serving ``<dir>/<name>``; it mounts ``/tmp/<id>`` per device."""

    def __init__(self, directory: str, name: str = "fake.sock", *,
                 devices: dict[str, str] | None = None, preferred: list[str] | None = None,
                 pre_start: bool = False, numa: dict[str, list[int]] | None = None) -> None:
        self.directory = directory
        self.socket = os.path.join(directory, name)
        self.devices = devices if devices is not None else {"dev-1": "Healthy",
                                                            "dev-2": "Healthy"}
        self.preferred = preferred
        self.pre_start = pre_start
        # Device id -> the NUMA nodes the plugin reports it on (none: no topology).
        self.numa = numa or {}
        self.allocations: list[list[str]] = []
        self.pre_starts: list[list[str]] = []
        self.preference_requests: list[pluginapi.ContainerPreferredAllocationRequest] = []
        self._changes: asyncio.Queue[None] = asyncio.Queue()
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pluginapi_grpc.add_DevicePluginServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        await self._server.start()

    async def stop(self) -> None:
        assert self._server is not None
        await self._server.stop(grace=None)

    async def register(self, *, version: str = "v1beta1", resource: str = RESOURCE) -> None:
        async with grpc.aio.insecure_channel(
                f"unix://{os.path.join(self.directory, 'kubelet.sock')}") as channel:
            await pluginapi_grpc.RegistrationStub(channel).Register(pluginapi.RegisterRequest(
                version=version, endpoint=os.path.basename(self.socket),
                resource_name=resource), timeout=10)

    def set_health(self, device: str, health: str) -> None:
        self.devices[device] = health
        self._changes.put_nowait(None)

    def _topology(self, device: str) -> pluginapi.TopologyInfo | None:
        if device not in self.numa:
            return None
        return pluginapi.TopologyInfo(nodes=[pluginapi.NUMANode(ID=n) for n in self.numa[device]])

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pluginapi.DevicePluginOptions(
            pre_start_required=self.pre_start,
            get_preferred_allocation_available=self.preferred is not None)

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        while True:
            yield pluginapi.ListAndWatchResponse(devices=[
                pluginapi.Device(ID=i, health=h, topology=self._topology(i))
                for i, h in self.devices.items()])
            await self._changes.get()

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        self.preference_requests.extend(request.container_requests)
        return pluginapi.PreferredAllocationResponse(container_responses=[
            pluginapi.ContainerPreferredAllocationResponse(deviceIDs=self.preferred or [])])

    async def Allocate(self, request: Any, context: Any) -> Any:
        responses = []
        for req in request.container_requests:
            self.allocations.append(sorted(req.devices_ids))
            responses.append(pluginapi.ContainerAllocateResponse(
                envs={"FAKE_DEVICES": ",".join(sorted(req.devices_ids))},
                mounts=[pluginapi.Mount(container_path=f"/tmp/{d}", host_path=f"/tmp/{d}")
                        for d in sorted(req.devices_ids)],
                devices=[pluginapi.DeviceSpec(container_path="/dev/fake",
                                              host_path="/dev/null", permissions="rw")],
                annotations={"example.com/devices": ",".join(sorted(req.devices_ids))}))
        return pluginapi.AllocateResponse(container_responses=responses)

    async def PreStartContainer(self, request: Any, context: Any) -> Any:
        self.pre_starts.append(sorted(request.devices_ids))
        return pluginapi.PreStartContainerResponse()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_pod(name: str, *counts: int, init: tuple[int, ...] = (),
             sidecars: tuple[int, ...] = (), uid: str | None = None) -> Any:
    """App containers ``c<i>``, then init containers ``init<i>`` and sidecars (restartable
    init containers) ``sidecar<i>``, each asking for its count of devices."""
    def container(prefix: str, i: int, count: int) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": f"{prefix}{i}", "image": "busybox"}
        if count:
            spec["resources"] = {"limits": {RESOURCE: str(count)},
                                 "requests": {RESOURCE: str(count)}}
        if prefix == "sidecar":
            spec["restartPolicy"] = "Always"
        return spec
    return pod_from_dict({
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
        "spec": {"initContainers": [*(container("sidecar", i, c) for i, c in enumerate(sidecars)),
                                    *(container("init", i, c) for i, c in enumerate(init))],
                 "containers": [container("c", i, c) for i, c in enumerate(counts)]}})


@pytest.fixture
def plugin_dir() -> Iterator[str]:
    # Unix socket paths are short; pytest's tmp_path may not be.
    directory = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


class Node:
    """A manager and its active pods, started on ``plugin_dir``."""

    def __init__(self, plugin_dir: str, clock: Clock | None = None, *,
                 numa_nodes: tuple[int, ...] = (0,),
                 topology_policy: str = "none") -> None:
        self.pods: list[Any] = []
        # What the runtime runs: (pod UID, container name).
        self.running: set[tuple[str, str]] = set()
        self.clock = clock or Clock()
        self.affinity = AffinityStore()

        async def running() -> set[tuple[str, str]]:
            return set(self.running)

        self.manager = DeviceManager(active_pods=lambda: list(self.pods),
                                     sources_ready=lambda: True, running_containers=running,
                                     numa_nodes=numa_nodes, plugin_dir=plugin_dir,
                                     affinity=self.affinity.get_affinity,
                                     grace_period=300.0, clock=self.clock,
                                     housekeeping_period=0.05)
        # Admission as the kubelet runs it: the topology manager asks the device manager
        # for hints (unless its policy is none) and to allocate each container.
        self.topology = new_topology_manager(
            policy_name=topology_policy, scope_name="container",
            numa_nodes=list(numa_nodes), hint_providers=[self.manager],
            store=self.affinity)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.manager.start()
        self._task = asyncio.create_task(self.manager.run())
        await until(lambda: os.path.exists(self.manager.server.socket_path),
                    what="kubelet.sock served")

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._task

    async def admit(self, pod: Any) -> Any:
        self.pods.append(pod)
        result = await self.topology.admit(PodAdmitAttributes(pod, []))
        if not result.admit:
            self.pods.remove(pod)
        return result


@pytest.fixture
async def node(plugin_dir: str) -> AsyncIterator[Node]:
    started = Node(plugin_dir)
    await started.start()
    yield started
    await started.stop()


@pytest.fixture
async def two_numa_node(plugin_dir: str) -> AsyncIterator[Node]:
    """A machine with NUMA nodes 0 and 1 under the single-numa-node policy."""
    started = Node(plugin_dir, numa_nodes=(0, 1), topology_policy="single-numa-node")
    await started.start()
    yield started
    await started.stop()


async def plugin_on(node: Node, **options: Any) -> FakePlugin:
    plugin = FakePlugin(node.manager.plugin_dir, **options)
    await plugin.start()
    await plugin.register()
    await until(lambda: node.manager.get_capacity()[0].get(RESOURCE) == len(plugin.devices),
                what="the plugin's devices on the node")
    return plugin


# -- registration and the node ------------------------------------------------------------


async def test_a_registered_plugin_devices_are_the_node_capacity(node: Node) -> None:
    plugin = await plugin_on(node)
    assert node.manager.get_capacity() == ({RESOURCE: 2}, {RESOURCE: 2}, [])
    plugin.set_health("dev-2", "Unhealthy")
    await until(lambda: node.manager.get_capacity()[1] == {RESOURCE: 1},
                what="the unhealthy device out of allocatable")
    assert node.manager.get_capacity()[0] == {RESOURCE: 2}
    assert [d.device_ids for d in node.manager.get_allocatable_devices()] == [["dev-1"]]
    await plugin.stop()


@pytest.mark.parametrize(("version", "resource", "message"), [
    ("v1alpha", RESOURCE, 'requested API version "v1alpha" is not supported by kubelet. '
                          'Supported versions are ["v1beta1"]'),
    ("v1beta1", "resource", 'the ResourceName "resource" is invalid'),
    ("v1beta1", "kubernetes.io/resource", 'the ResourceName "kubernetes.io/resource" is invalid'),
])
async def test_a_bad_registration_is_refused_with_upstreams_reason(
        node: Node, version: str, resource: str, message: str) -> None:
    plugin = FakePlugin(node.manager.plugin_dir)
    await plugin.start()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plugin.register(version=version, resource=resource)
    assert refused.value.details() == message
    assert node.manager.get_capacity() == ({}, {}, [])
    await plugin.stop()


async def test_a_plugin_that_cannot_be_dialed_is_told_so(node: Node) -> None:
    plugin = FakePlugin(node.manager.plugin_dir)  # never started
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plugin.register()
    assert "failed to dial device plugin" in (refused.value.details() or "")


def test_extended_resource_names() -> None:
    assert is_extended_resource_name("example.com/resource")
    assert is_extended_resource_name("nvidia.com/gpu")
    for name in ("gpu", "kubernetes.io/gpu", "requests.example.com/x", "Example.com/x",
                 "example.com/", "example.com/-x"):
        assert not is_extended_resource_name(name), name


async def test_a_dead_plugin_leaves_allocatable_at_once_and_capacity_after_grace(
        node: Node) -> None:
    plugin = await plugin_on(node)
    await plugin.stop()
    await until(lambda: node.manager.get_capacity()[1] == {RESOURCE: 0},
                what="allocatable dropped to 0")
    assert node.manager.get_capacity() == ({RESOURCE: 2}, {RESOURCE: 0}, [])
    node.clock.now += 299
    await node.manager.housekeeping()
    assert node.manager.get_capacity() == ({RESOURCE: 2}, {RESOURCE: 0}, [])
    node.clock.now += 2
    await node.manager.housekeeping()
    # Reported removed on every read (the node status keeps it at 0)...
    assert node.manager.get_capacity() == ({}, {}, [RESOURCE])
    assert node.manager.get_capacity() == ({}, {}, [RESOURCE])
    # ...until the plugin registers again.
    back = await plugin_on(node)
    assert node.manager.get_capacity() == ({RESOURCE: 2}, {RESOURCE: 2}, [])
    await back.stop()


def registered_in_checkpoint(node: Node) -> dict[str, list[str]]:
    with open(node.manager.checkpoint_path) as f:
        registered: dict[str, list[str]] = json.load(f)["Data"]["RegisteredDevices"]
    return registered


async def test_a_plugin_gone_past_the_grace_period_expires_without_anyone_reading_capacity(
        node: Node) -> None:
    # A standalone node: no node status ever calls get_capacity.
    plugin = await plugin_on(node)
    await plugin.stop()
    await until(lambda: node.manager.allocatable() == {RESOURCE: 0}, what="plugin gone")
    node.clock.now += 301
    await node.manager.housekeeping()
    assert registered_in_checkpoint(node) == {}
    assert node.manager.allocatable() == {}


async def test_reading_capacity_changes_nothing(node: Node) -> None:
    plugin = await plugin_on(node)
    await plugin.stop()
    await until(lambda: node.manager.allocatable() == {RESOURCE: 0}, what="plugin gone")
    node.clock.now += 301
    before = registered_in_checkpoint(node)
    # Past the grace period, but before housekeeping ran: a read deletes nothing.
    node.manager.get_capacity()
    assert registered_in_checkpoint(node) == before == {RESOURCE: []}
    assert node.manager.allocatable() == {RESOURCE: 0}


async def test_a_plugin_whose_stream_ended_is_not_dialed_again(node: Node) -> None:
    plugin = await plugin_on(node, pre_start=True)
    pod = make_pod("a", 1)
    assert (await node.admit(pod)).admit
    endpoint = node.manager._registry.endpoint(RESOURCE)
    assert endpoint is not None and not endpoint.is_closed()
    await plugin.stop()
    await until(endpoint.is_closed, what="the stopped plugin's channel closed")
    # A plugin serving that socket again is not reached through the old endpoint.
    await plugin.start()
    with pytest.raises(DeviceAllocationError,
                       match=f"PreStartContainer rpc failed with err: endpoint {RESOURCE} "
                             "has been stopped"):
        await node.manager.device_run_options(pod, pod.spec.containers[0])
    assert plugin.pre_starts == []
    await plugin.stop()


def sample(name: str) -> float:
    return metrics.KUBELET_REGISTRY.get_sample_value(name, {"resource_name": RESOURCE}) or 0.0


async def test_registrations_and_allocation_calls_are_counted_under_upstreams_names(
        node: Node) -> None:
    registered = sample("kubelet_device_plugin_registration_total")
    allocations = sample("kubelet_device_plugin_alloc_duration_seconds_count")
    plugin = await plugin_on(node)
    assert (await node.admit(make_pod("a", 1))).admit
    assert sample("kubelet_device_plugin_registration_total") == registered + 1
    assert sample("kubelet_device_plugin_alloc_duration_seconds_count") == allocations + 1
    await plugin.stop()


async def test_a_reregistering_plugin_replaces_its_endpoint(node: Node) -> None:
    old = await plugin_on(node)
    new = FakePlugin(node.manager.plugin_dir, "new.sock",
                     devices={"dev-1": "Healthy", "dev-2": "Healthy", "dev-3": "Healthy"})
    await new.start()
    await new.register()
    await until(lambda: node.manager.get_capacity()[0] == {RESOURCE: 3},
                what="the new plugin's devices")
    await old.stop()  # the replaced stream ending does not touch the new one
    await node.admit(make_pod("a", 1))
    assert new.allocations == [["dev-1"]] and old.allocations == []
    assert node.manager.get_capacity() == ({RESOURCE: 3}, {RESOURCE: 3}, [])
    await new.stop()


async def test_start_removes_stale_sockets_but_keeps_the_checkpoint(plugin_dir: str) -> None:
    stale = os.path.join(plugin_dir, "dead.sock")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(stale)
    other = os.path.join(plugin_dir, "notes.txt")
    with open(other, "w") as f:
        f.write("kept")
    restarted = Node(plugin_dir)
    await restarted.start()
    assert not os.path.exists(stale) and os.path.exists(other)
    await restarted.stop()


async def test_a_removed_kubelet_socket_is_recreated(node: Node) -> None:
    os.unlink(node.manager.server.socket_path)
    await until(lambda: os.path.exists(node.manager.server.socket_path),
                what="kubelet.sock recreated")
    plugin = await plugin_on(node)
    await plugin.stop()


# -- allocation -----------------------------------------------------------------------------


async def test_a_container_gets_its_plugins_allocation(node: Node) -> None:
    plugin = await plugin_on(node)
    pod = make_pod("a", 1)
    assert (await node.admit(pod)).admit
    assert plugin.allocations == [["dev-1"]]
    options = await node.manager.device_run_options(pod, pod.spec.containers[0])
    assert options.envs == {"FAKE_DEVICES": "dev-1"}
    assert [(m.container_path, m.host_path) for m in options.mounts] == [("/tmp/dev-1",
                                                                          "/tmp/dev-1")]
    assert [(d.container_path, d.host_path, d.permissions) for d in options.devices] == [
        ("/dev/fake", "/dev/null", "rw")]
    assert options.annotations == {"example.com/devices": "dev-1"}
    assert [tuple(d) for d in node.manager.get_devices("uid-a", "c0")] == [
        (RESOURCE, ["dev-1"], [])]
    # A container without devices gets nothing, a second pod the other device.
    assert (await node.manager.device_run_options(make_pod("x", 0),
                                                  make_pod("x", 0).spec.containers[0])).empty()
    assert (await node.admit(make_pod("b", 1))).admit
    assert plugin.allocations == [["dev-1"], ["dev-2"]]
    await plugin.stop()


async def test_the_plugins_preferred_devices_are_taken(node: Node) -> None:
    plugin = await plugin_on(node, preferred=["dev-2"])
    assert (await node.admit(make_pod("a", 1))).admit
    assert plugin.allocations == [["dev-2"]]
    request = plugin.preference_requests[0]
    assert sorted(request.available_deviceIDs) == ["dev-1", "dev-2"]
    assert request.allocation_size == 1
    await plugin.stop()


async def test_a_pod_asking_for_more_than_there_is_is_refused(node: Node) -> None:
    plugin = await plugin_on(node)
    result = await node.admit(make_pod("greedy", 3))
    assert not result.admit
    assert result.reason == "UnexpectedAdmissionError"
    assert result.message == ("Allocate failed due to requested number of devices unavailable "
                              "for example.com/resource. Requested: 3, Available: 2, which is "
                              "unexpected")
    assert plugin.allocations == []
    # Nothing was kept for it: two single-device pods still fit.
    assert (await node.admit(make_pod("a", 1))).admit
    assert (await node.admit(make_pod("b", 1))).admit
    assert not (await node.admit(make_pod("c", 1))).admit
    await plugin.stop()


async def test_devices_of_gone_pods_are_freed(node: Node) -> None:
    plugin = await plugin_on(node)
    first = make_pod("a", 2)
    assert (await node.admit(first)).admit
    assert not (await node.admit(make_pod("b", 1))).admit
    node.pods.remove(first)
    assert (await node.admit(make_pod("b", 1))).admit
    await plugin.stop()


async def test_init_container_devices_are_reused_by_app_containers(node: Node) -> None:
    plugin = await plugin_on(node)
    pod = make_pod("a", 1, 1, init=(1,))
    assert (await node.admit(pod)).admit
    # The init container's device goes on to an app container, not a third one.
    assert plugin.allocations == [["dev-1"], ["dev-1"], ["dev-2"]]
    await plugin.stop()


async def test_pre_start_container_is_called_when_the_plugin_asks(node: Node) -> None:
    plugin = await plugin_on(node, pre_start=True)
    pod = make_pod("a", 2)
    assert (await node.admit(pod)).admit
    assert plugin.pre_starts == []
    await node.manager.device_run_options(pod, pod.spec.containers[0])
    assert plugin.pre_starts == [["dev-1", "dev-2"]]
    await plugin.stop()


async def test_a_dead_plugin_fails_the_container_start(node: Node) -> None:
    plugin = await plugin_on(node, pre_start=True)
    pod = make_pod("a", 1)
    assert (await node.admit(pod)).admit
    await plugin.stop()
    await until(lambda: node.manager.get_capacity()[1] == {RESOURCE: 0}, what="plugin gone")
    with pytest.raises(DeviceAllocationError, match="PreStartContainer rpc failed"):
        await node.manager.device_run_options(pod, pod.spec.containers[0])


# -- the checkpoint ----------------------------------------------------------------------


async def test_a_restart_keeps_every_assignment(plugin_dir: str) -> None:
    first = Node(plugin_dir)
    await first.start()
    plugin = await plugin_on(first)
    kept = make_pod("kept", 1)
    assert (await first.admit(kept)).admit
    await first.stop()
    await plugin.stop()

    with open(os.path.join(plugin_dir, CHECKPOINT_NAME)) as f:
        document = json.load(f)
    assert document["Data"]["RegisteredDevices"] == {RESOURCE: ["dev-1", "dev-2"]}
    [entry] = document["Data"]["PodDeviceEntries"]
    assert (entry["PodUID"], entry["ContainerName"], entry["ResourceName"],
            entry["DeviceIDs"]) == ("uid-kept", "c0", RESOURCE, {"-1": ["dev-1"]})
    assert isinstance(document["Checksum"], int)

    second = Node(plugin_dir)
    second.running.add(("uid-kept", "c0"))
    await second.start()
    # Until the plugin is back the resource is there with no devices.
    assert second.manager.get_capacity() == ({RESOURCE: 0}, {RESOURCE: 0}, [])
    plugin = await plugin_on(second)
    # Another pod admitted before the running one does not get its device...
    assert not (await second.admit(make_pod("two", 2))).admit
    # ...and the running pod is re-admitted without a new allocation, with its options.
    assert (await second.admit(kept)).admit
    options = await second.manager.device_run_options(kept, kept.spec.containers[0])
    assert options.envs == {"FAKE_DEVICES": "dev-1"}
    assert (await second.admit(make_pod("one", 1))).admit
    assert plugin.allocations == [["dev-2"]]
    await second.stop()
    await plugin.stop()


async def test_a_corrupt_checkpoint_is_ignored(plugin_dir: str) -> None:
    with open(os.path.join(plugin_dir, CHECKPOINT_NAME), "w") as f:
        f.write('{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"a.b/c":[]}},'
                '"Checksum":1}')
    restarted = Node(plugin_dir)
    await restarted.start()
    assert restarted.manager.get_capacity() == ({}, {}, [])
    await restarted.stop()


def test_the_checksum_is_upstreams() -> None:
    # Checkpoints written by Go kubelets, as published with their checksums.
    assert checksum(CheckpointData([], {"nvidia.com/gpu": [
        "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]})) == 3952659280
    assert checksum(CheckpointData([PodDevicesEntry(
        "bf52b2cd-b611-4e79-86b1-280b283185c3", "check", "nvidia.com/gpu", {-1: ["tegra"]},
        base64.b64decode("Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"))],
        {"nvidia.com/gpu": ["tegra"]})) == 3660592824


# -- what the node status and the runtime get -----------------------------------------------


async def test_the_node_status_shows_devices_and_zeroes_deleted_resources() -> None:
    machine = MachineInfo(num_cores=2, memory_capacity=2**30)
    node = V1Node(metadata=V1ObjectMeta(name="n1"),
                  status=V1NodeStatus(capacity={"example.com/gone": "4"}))
    answers = [({RESOURCE: 2}, {RESOURCE: 1}, ["example.com/gone"])]
    setter = setters.machine_info("n1", 110, 0, machine, MachineResources(machine, None),
                                  lambda *e: None, lambda: answers[0])
    await setter(node)
    assert node.status.capacity[RESOURCE] == "2"
    assert node.status.allocatable[RESOURCE] == "1"
    assert node.status.capacity["example.com/gone"] == "0"
    assert node.status.allocatable["example.com/gone"] == "0"


def test_the_container_config_carries_the_devices() -> None:
    pod = pod_from_dict({
        "metadata": {"name": "a", "namespace": "default", "uid": "uid-a"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                 "env": [{"name": "SHARED", "value": "spec"}]}]}})
    devices = DeviceRunOptions(
        envs={"SHARED": "plugin", "VISIBLE": "dev-1"},
        mounts=[DeviceMount("/tmp/dev-1", "/tmp/dev-1", read_only=True)],
        devices=[DeviceSpec("/dev/fake0", "/dev/null", "rw")],
        annotations={"example.com/a": "1"}, cdi_devices=["example.com/class=dev-1"])
    with tempfile.TemporaryDirectory() as logs:
        config = generate_container_config(
            pod.spec.containers[0], pod, 0, "busybox",
            ContainerOptions(pod_dir=os.path.join(logs, "pod"), pod_logs_dir=logs),
            devices=devices)
    assert [(e.key, e.value) for e in config.envs][:2] == [("VISIBLE", "dev-1"),
                                                           ("SHARED", "spec")]
    assert [(m.container_path, m.host_path, m.readonly) for m in config.mounts][:1] == [
        ("/tmp/dev-1", "/tmp/dev-1", True)]
    assert [(d.container_path, d.host_path, d.permissions) for d in config.devices] == [
        ("/dev/fake0", "/dev/null", "rw")]
    assert config.annotations["example.com/a"] == "1"
    assert [d.name for d in config.CDI_devices] == ["example.com/class=dev-1"]


async def test_predicates_see_allocatable_raised_to_what_pods_already_hold(node: Node) -> None:
    plugin = await plugin_on(node)
    assert (await node.admit(make_pod("a", 1))).admit
    seen = V1Node(metadata=V1ObjectMeta(name="n1"), status=V1NodeStatus(
        capacity={RESOURCE: "2", "cpu": "2"}, allocatable={RESOURCE: "0", "cpu": "2"},
        volumes_in_use=["kubernetes.io/csi/x"]))
    sanitized = node.manager.sanitize_node_allocatable(seen)
    assert sanitized.status.allocatable == {RESOURCE: "1", "cpu": "2"}
    # Everything else of the Node is kept, and the Node itself is left alone.
    assert sanitized.status.capacity == {RESOURCE: "2", "cpu": "2"}
    assert sanitized.status.volumes_in_use == ["kubernetes.io/csi/x"]
    assert seen.status.allocatable == {RESOURCE: "0", "cpu": "2"}
    await plugin.stop()


# -- NUMA hints (upstream topology_hints.go) -------------------------------------------------


def hint(*nodes: int, preferred: bool = True) -> TopologyHint:
    return TopologyHint(BitMask.of(*nodes), preferred)


async def test_a_device_on_the_second_numa_node_is_hinted_there(
        two_numa_node: Node) -> None:
    node = two_numa_node
    plugin = await plugin_on(node, devices={"dev-1": "Healthy"}, numa={"dev-1": [1]})
    pod = make_pod("a", 1)
    assert node.manager.get_topology_hints(pod, pod.spec.containers[0]) == {
        RESOURCE: [hint(1), hint(0, 1, preferred=False)]}
    # The topology manager admits it on node 1, and the device is allocated.
    assert (await node.admit(pod)).admit
    assert node.affinity.get_affinity("uid-a", "c0") == hint(1)
    assert plugin.allocations == [["dev-1"]]
    await plugin.stop()


async def test_the_device_of_a_finished_pod_is_hinted_again_once_prepared(
        two_numa_node: Node) -> None:
    node = two_numa_node
    plugin = await plugin_on(node, devices={"dev-1": "Healthy"}, numa={"dev-1": [0]})
    finished = make_pod("finished", 1)
    assert (await node.admit(finished)).admit
    node.pods.remove(finished)  # it ran to completion: no longer active, nothing runs
    pod = make_pod("next", 1)
    await node.manager.prepare_for_admission(pod)
    assert node.manager.get_topology_hints(pod, pod.spec.containers[0]) == {
        RESOURCE: [hint(0), hint(0, 1, preferred=False)]}
    assert node.manager.get_pod_topology_hints(pod) == {
        RESOURCE: [hint(0), hint(0, 1, preferred=False)]}
    await plugin.stop()


async def test_a_pod_asking_for_a_finished_pods_device_is_admitted_on_its_numa_node(
        two_numa_node: Node) -> None:
    node = two_numa_node
    plugin = await plugin_on(node, devices={"dev-1": "Healthy"}, numa={"dev-1": [1]})
    finished = make_pod("finished", 1)
    assert (await node.admit(finished)).admit
    node.pods.remove(finished)
    assert (await node.admit(make_pod("next", 1))).admit
    assert node.affinity.get_affinity("uid-next", "c0") == hint(1)
    assert plugin.allocations == [["dev-1"], ["dev-1"]]
    await plugin.stop()


async def test_a_sidecar_and_an_app_container_need_their_devices_at_once(
        two_numa_node: Node) -> None:
    node = two_numa_node
    plugin = await plugin_on(node, devices={"dev-1": "Healthy", "dev-2": "Healthy"},
                             numa={"dev-1": [0], "dev-2": [1]})
    # The sidecar runs beside the init container and the app container: 2 at once,
    # more than the largest init container (1) or the app containers' sum (1).
    pod = make_pod("a", 1, sidecars=(1,), init=(1,))
    assert node.manager.get_pod_topology_hints(pod) == {RESOURCE: [hint(0, 1)]}
    await plugin.stop()


async def test_the_pod_resources_api_gets_one_entry_per_device_and_numa_node(
        two_numa_node: Node) -> None:
    node = two_numa_node
    plugin = await plugin_on(node, devices={"dev-1": "Healthy", "dev-2": "Healthy"},
                             numa={"dev-1": [0, 1]})
    assert [tuple(d) for d in node.manager.get_allocatable_devices()] == [
        (RESOURCE, ["dev-1"], [0]), (RESOURCE, ["dev-1"], [1]), (RESOURCE, ["dev-2"], [])]
    pod = make_pod("a", 2)
    await node.manager.allocate(pod, pod.spec.containers[0])
    assert [tuple(d) for d in node.manager.get_devices("uid-a", "c0")] == [
        (RESOURCE, ["dev-1"], [0]), (RESOURCE, ["dev-1"], [1]), (RESOURCE, ["dev-2"], [])]
    await plugin.stop()
