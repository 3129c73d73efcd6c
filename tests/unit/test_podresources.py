"""The pod-resources API as a monitoring agent reads it: a real gRPC client on the real socket."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from kubernetes_asyncio.client import V1Pod

from pykubelet import metrics
from pykubelet.api import pod_from_dict
from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.api.proto import podresources_v1_pb2 as pb
from pykubelet.api.proto import podresources_v1_pb2_grpc as pb_grpc
from pykubelet.cm.devicemanager import DeviceManager, checkpoint
from pykubelet.cm.devicemanager.checkpoint import CheckpointData, PodDevicesEntry
from pykubelet.podresources import (
    DeviceAssignment,
    PodResourcesServer,
    Providers,
    pod_resources_socket,
    serve_pod_resources,
)
from pykubelet.util.flowcontrol import TokenBucket


def pod(name: str, uid: str, *, containers: Sequence[str] = ("app",),
        init: Sequence[tuple[str, str | None]] = ()) -> V1Pod:
    return pod_from_dict({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": c, "image": "i"} for c in containers],
                 "initContainers": [{"name": c, "image": "i",
                                     **({"restartPolicy": policy} if policy else {})}
                                    for c, policy in init]}})


@dataclass
class Node:
    pods: list[V1Pod] = field(default_factory=list)
    devices: dict[tuple[str, str], list[DeviceAssignment]] = field(default_factory=dict)
    cpus: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    all_devices: list[DeviceAssignment] = field(default_factory=list)
    allocatable: list[int] = field(default_factory=list)

    def active_pods(self) -> list[V1Pod]:
        return list(self.pods)

    def pod_by_name(self, namespace: str, name: str) -> V1Pod | None:
        return next((p for p in self.pods
                     if (p.metadata.namespace, p.metadata.name) == (namespace, name)), None)

    def get_devices(self, pod_uid: str, container_name: str) -> list[DeviceAssignment]:
        return self.devices.get((pod_uid, container_name), [])

    def get_allocatable_devices(self) -> list[DeviceAssignment]:
        return self.all_devices

    def exclusive_cpus(self, pod_uid: str, container_name: str) -> list[int]:
        return self.cpus.get((pod_uid, container_name), [])

    def allocatable_cpus(self) -> list[int]:
        return self.allocatable


@dataclass
class Served:
    node: Node
    client: Any
    socket: str


class FrozenClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    node = Node()
    socket = pod_resources_socket(str(tmp_path))
    ready = asyncio.Event()
    server = PodResourcesServer(Providers(node, node, node),
                                limiter=TokenBucket(100, 10, clock=FrozenClock()))
    task = asyncio.create_task(serve_pod_resources(server, socket, serving=ready.set))
    await ready.wait()
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        yield Served(node, pb_grpc.PodResourcesListerStub(channel), socket)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_list_reports_each_container_with_its_devices_and_exclusive_cpus(
        served: Served) -> None:
    gpu = pod("gpu", "u1", containers=("main", "helper"),
              init=[("setup", None), ("proxy", "Always")])
    served.node.pods = [gpu, pod("plain", "u2")]
    served.node.devices[("u1", "main")] = [("example.com/resource", ["Dev-1"], [0])]
    served.node.cpus[("u1", "main")] = [1]
    served.node.cpus[("u1", "proxy")] = [3]

    listed = await served.client.List(pb.ListPodResourcesRequest())

    by_name = {p.name: p for p in listed.pod_resources}
    assert set(by_name) == {"gpu", "plain"}
    # The sidecar (restartable init container) is reported before the app containers; a
    # plain init container, which has finished before they run, is not.
    assert [c.name for c in by_name["gpu"].containers] == ["proxy", "main", "helper"]
    main = by_name["gpu"].containers[1]
    assert [(d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes])
            for d in main.devices] == [("example.com/resource", ["Dev-1"], [0])]
    assert list(main.cpu_ids) == [1]
    assert list(by_name["gpu"].containers[0].cpu_ids) == [3]
    assert by_name["plain"].namespace == "ns"
    assert [(c.name, list(c.devices), list(c.cpu_ids))
            for c in by_name["plain"].containers] == [("app", [], [])]


async def test_get_answers_for_one_pod_and_names_an_unknown_one(served: Served) -> None:
    served.node.pods = [pod("gpu", "u1")]
    served.node.devices[("u1", "app")] = [("example.com/resource", ["Dev-2"], [])]
    got = await served.client.Get(pb.GetPodResourcesRequest(pod_name="gpu",
                                                            pod_namespace="ns"))
    assert got.pod_resources.name == "gpu"
    assert list(got.pod_resources.containers[0].devices[0].device_ids) == ["Dev-2"]
    errors_before = metrics.POD_RESOURCES_ERRORS_GET.labels("v1")._value.get()

    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await served.client.Get(pb.GetPodResourcesRequest(pod_name="gone", pod_namespace="ns"))

    assert missing.value.details() == "pod gone in namespace ns not found"
    assert metrics.POD_RESOURCES_ERRORS_GET.labels("v1")._value.get() == errors_before + 1


async def test_allocatable_lists_every_device_and_the_exclusive_cpu_pool(
        served: Served) -> None:
    served.node.all_devices = [("example.com/resource", ["Dev-1"], [0]),
                               ("example.com/resource", ["Dev-2"], [0])]
    served.node.allocatable = [1, 2, 3]
    allocatable = await served.client.GetAllocatableResources(
        pb.AllocatableResourcesRequest())
    assert sorted(d for entry in allocatable.devices for d in entry.device_ids) == [
        "Dev-1", "Dev-2"]
    assert list(allocatable.cpu_ids) == [1, 2, 3]
    assert list(allocatable.memory) == []


async def test_callers_over_the_rate_limit_are_refused_until_tokens_come_back(
        served: Served) -> None:
    # The bucket's clock is frozen: the burst of 10 is all there is.
    for _ in range(10):
        await served.client.List(pb.ListPodResourcesRequest())
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.client.List(pb.ListPodResourcesRequest())
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == "rejected by rate limit"


async def test_a_socket_left_by_an_earlier_kubelet_is_replaced(
        tmp_path: Path) -> None:
    socket = pod_resources_socket(str(tmp_path))
    os.makedirs(os.path.dirname(socket))
    Path(socket).write_text("stale")
    node = Node(pods=[pod("p", "u")])
    ready = asyncio.Event()
    task = asyncio.create_task(serve_pod_resources(
        PodResourcesServer(Providers(node, node, node)), socket, serving=ready.set))
    await ready.wait()
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        listed = await pb_grpc.PodResourcesListerStub(channel).List(
            pb.ListPodResourcesRequest())
    assert [p.name for p in listed.pod_resources] == ["p"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_get_can_be_switched_off_by_its_feature_gate(tmp_path: Path) -> None:
    node = Node(pods=[pod("p", "u")])
    socket = pod_resources_socket(str(tmp_path))
    ready = asyncio.Event()
    task = asyncio.create_task(serve_pod_resources(
        PodResourcesServer(Providers(node, node, node), get_enabled=False), socket,
        serving=ready.set))
    await ready.wait()
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as disabled:
            await pb_grpc.PodResourcesListerStub(channel).Get(
                pb.GetPodResourcesRequest(pod_name="p", pod_namespace="ns"))
    assert disabled.value.details() == "PodResources API Get method disabled"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_device_on_two_numa_nodes_is_listed_once_per_node(tmp_path: Path) -> None:
    # The device manager as the kubelet restarts it: a container holds dev-1 (on NUMA
    # nodes 0 and 1) and dev-2 (no topology), as its checkpoint records.
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()
    answer = pluginapi.ContainerAllocateResponse().SerializeToString()
    checkpoint.write(str(plugin_dir / checkpoint.CHECKPOINT_NAME), CheckpointData(
        [PodDevicesEntry("u1", "app", "example.com/resource",
                         {0: ["dev-1"], 1: ["dev-1"], -1: ["dev-2"]}, answer)],
        {"example.com/resource": []}))
    node = Node(pods=[pod("gpu", "u1")])
    devices = DeviceManager(active_pods=node.active_pods, sources_ready=lambda: True,
                            numa_nodes=[0, 1], plugin_dir=str(plugin_dir))
    await devices.start()
    socket = pod_resources_socket(str(tmp_path))
    ready = asyncio.Event()
    task = asyncio.create_task(serve_pod_resources(
        PodResourcesServer(Providers(node, devices, node)), socket, serving=ready.set))
    await ready.wait()
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        listed = await pb_grpc.PodResourcesListerStub(channel).List(
            pb.ListPodResourcesRequest())
    [container] = listed.pod_resources[0].containers
    assert [(list(d.device_ids), [n.ID for n in d.topology.nodes], d.HasField("topology"))
            for d in container.devices] == [
        (["dev-1"], [0], True), (["dev-1"], [1], True), (["dev-2"], [], False)]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await devices.stop()
