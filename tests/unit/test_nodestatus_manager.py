"""Registration, the status sync's write decisions and retries, re-registration, the fast
first update — against a fake Node API at the seam (the real API server tests are in
tests/integration/test_cluster_node.py)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Node, V1NodeAddress, V1Taint

from pykubelet.api import from_dict
from pykubelet.kubelet.runtime_state import RuntimeState
from pykubelet.nodestatus import NodeStatusManager, NodeStatusOptions, birth_cry
from pykubelet.nodestatus import setters as s
from pykubelet.nodestatus.machine import MachineInfo, VersionInfo
from pykubelet.nodestatus.resources import MachineResources
from tests.unit.fake_nodes import FakeCache, FakeNodeAPI
from tests.unit.kubelet_fakes import new_kubelet

GIB = 1024**3
VERSION = VersionInfo("6.1.0", "Debian GNU/Linux 12 (bookworm)")


class Health:
    def __init__(self) -> None:
        self.errors = ["container runtime status check may not have completed yet"]

    def runtime_errors(self) -> list[str]:
        return list(self.errors)

    def network_errors(self) -> list[str]:
        return []


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, obj: Any, event_type: str, reason: str, message: str,
              field_path: str = "") -> None:
        self.events.append((obj.kind, event_type, reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, _, reason, _ in self.events]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def manager(api: FakeNodeAPI, cache: FakeCache, health: s.RuntimeHealth, recorder: Recorder,
            clock: Clock, **options: Any) -> NodeStatusManager:
    machine = MachineInfo(num_cores=2, memory_capacity=4 * GIB, boot_id="b1", machine_id="m1")
    opts = NodeStatusOptions(node_name="n1", hostname="n1", **options)
    m = NodeStatusManager(opts, api, api, cache, recorder, server="https://test",
                          clock=clock, sleep=no_sleep)

    async def runtime_version() -> tuple[str, str]:
        return "containerd", "1.6.20"

    async def images() -> list[s.Image]:
        return [s.Image(("busybox:1.35",), 1000)]

    now = s.utcnow
    record = m.record_node_status_event
    m.set_setters([
        fixed_addresses(),
        s.machine_info("n1", 110, 0, machine, MachineResources(machine, 20 * GIB), m.record_event),
        s.version_info(VERSION, runtime_version),
        s.daemon_endpoints(10250),
        s.images(50, images),
        s.go_runtime(),
        s.memory_pressure_condition(now, s.NoPressure(), record),
        s.disk_pressure_condition(now, s.NoPressure(), record),
        s.pid_pressure_condition(now, s.NoPressure(), record),
        s.ready_condition(now, health, record),
    ])
    return m


def fixed_addresses() -> s.Setter:
    """The address setter without this machine's interfaces."""

    async def setter(node: Any) -> None:
        node.status.addresses = [V1NodeAddress(type="InternalIP", address="192.0.2.1"),
                                 V1NodeAddress(type="Hostname", address="n1")]

    return setter


@pytest.fixture
def parts() -> tuple[FakeNodeAPI, FakeCache, Health, Recorder, Clock]:
    return FakeNodeAPI(), FakeCache(), Health(), Recorder(), Clock()


def ready(node: dict[str, Any]) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


async def test_registers_with_labels_taints_and_first_status(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    taint = V1Taint(key="dedicated", value="pyk", effect="NoSchedule")
    m = manager(api, cache, health, recorder, clock, node_labels={"tier": "edge"},
                register_with_taints=[taint])
    await m.sync_node_status()
    stored = api.nodes["n1"]
    labels = stored["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "n1"
    assert labels["kubernetes.io/os"] == "linux" and labels["tier"] == "edge"
    assert stored["spec"]["taints"] == [{"key": "dedicated", "value": "pyk",
                                         "effect": "NoSchedule"}]
    assert stored["metadata"]["annotations"] == {
        "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
    assert ready(stored) == "False"
    assert stored["status"]["capacity"]["pods"] == "110"
    assert [c["type"] for c in stored["status"]["conditions"]][-1] == "Ready"
    assert {"NodeHasSufficientMemory", "NodeHasNoDiskPressure",
            "NodeHasSufficientPID"} <= set(recorder.reasons())
    assert recorder.events[0][0] == "Node"
    assert "Node n1 status is now: NodeHasSufficientMemory" in [e[3] for e in recorder.events]


async def test_writes_only_on_change_or_report_frequency(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    m = manager(api, cache, health, recorder, clock, report_frequency=300.0)
    await m.sync_node_status()
    await m.sync_node_status()  # the first status write after registration
    writes = api.calls.count("patch")
    clock.now += 10
    await m.sync_node_status()
    assert api.calls.count("patch") == writes  # nothing changed, heartbeat is the lease
    assert "get" not in api.calls  # and the Node came from the cache
    health.errors = []
    clock.now += 10
    await m.sync_node_status()
    assert api.calls.count("patch") == writes + 1
    assert ready(api.nodes["n1"]) == "True"
    assert recorder.reasons().count("NodeReady") == 1
    clock.now += 301
    await m.sync_node_status()
    assert api.calls.count("patch") == writes + 2  # reported again after nodeStatusReportFrequency


async def test_five_tries_first_from_cache(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    failures: list[int] = []
    m = manager(api, cache, health, recorder, clock)
    m._on_repeated_heartbeat_failure = lambda: failures.append(1)
    await m.sync_node_status()
    health.errors = []
    api.calls.clear()
    api.fail_patches = [500, 500, 500, 500]
    await m.sync_node_status()
    # try 0 reads the cache, tries 1-4 GET from the API server; each patch but the last fails
    assert api.calls == ["patch", "get", "patch", "get", "patch", "get", "patch", "get", "patch"]
    assert len(failures) == 3  # upstream calls it from the second failed try on
    assert ready(api.nodes["n1"]) == "True"


async def test_gives_up_after_five_tries(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    m = manager(api, cache, health, recorder, clock)
    await m.sync_node_status()
    health.errors = []
    api.fail_patches = [500] * 10
    await m.sync_node_status()  # logged, not raised
    assert api.calls.count("patch") == 5 + 1
    assert ready(api.nodes["n1"]) == "False"


async def test_existing_node_keeps_users_labels_and_taints(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    first = manager(api, FakeCache(), health, recorder, clock)
    await first.sync_node_status()
    stored = api.nodes["n1"]
    stored["metadata"]["labels"]["kubernetes.io/hostname"] = "stale"
    stored["metadata"]["labels"]["team"] = "blue"
    stored["spec"]["taints"] = [{"key": "maintenance", "effect": "NoExecute"}]
    restarted = manager(api, cache, health, recorder, clock, node_labels={"tier": "edge"},
                        register_with_taints=[V1Taint(key="new", effect="NoSchedule")])
    await restarted.sync_node_status()
    labels = api.nodes["n1"]["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "n1"
    assert labels["team"] == "blue"
    assert "tier" not in labels  # --node-labels apply when the Node is created
    assert api.nodes["n1"]["spec"]["taints"] == [{"key": "maintenance", "effect": "NoExecute"}]


async def test_deleted_node_is_registered_again(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    m = manager(api, cache, health, recorder, clock)
    await m.sync_node_status()
    old_uid = api.nodes["n1"]["metadata"]["uid"]
    del api.nodes["n1"]
    cache.observe(None)  # the watch saw the DELETED event
    await m.sync_node_status()
    assert api.nodes["n1"]["metadata"]["uid"] != old_uid
    assert api.calls.count("create") == 2


async def test_deleted_node_noticed_from_the_api_too(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    m = manager(api, cache, health, recorder, clock)
    await m.sync_node_status()
    del api.nodes["n1"]  # the cache has not heard yet
    health.errors = []  # a change to write: the PATCH answers 404
    await m.sync_node_status()
    assert ready(api.nodes["n1"]) == "True"


async def test_fast_update_turns_ready_at_once(parts: Any) -> None:
    api, cache, health, recorder, clock = parts
    m = manager(api, cache, health, recorder, clock)
    await m.sync_node_status()
    assert ready(api.nodes["n1"]) == "False"
    checks = 0

    async def runtime_up() -> None:
        nonlocal checks
        checks += 1
        if checks == 3:
            health.errors = []

    await asyncio.wait_for(m.fast_status_update_once(runtime_up), 5)
    assert checks == 3
    assert ready(api.nodes["n1"]) == "True"


class ReadyHistory(FakeNodeAPI):
    """The Node API, remembering the Ready status of every Node it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: list[str] = []

    async def create_node(self, body: V1Node, /) -> V1Node:
        created = await super().create_node(body)
        self.reported.append(ready(self.nodes["n1"]))
        return created

    async def patch_node_status(self, name: str, body: Any, /) -> V1Node:
        patched = await super().patch_node_status(name, body)
        self.reported.append(ready(self.nodes["n1"]))
        return patched


async def turns(n: int, until: Any = lambda: False) -> None:
    """Let the event loop run ``n`` times (fewer once ``until()`` holds): no clock involved."""
    for _ in range(n):
        if until():
            return
        await asyncio.sleep(0)


async def test_a_restarted_kubelet_reports_its_node_only_after_checking_the_runtime(
        tmp_path: Path, parts: Any) -> None:
    """Upstream's node status goroutine calls updateRuntimeUp before syncNodeStatus: the
    Ready node of a restarted kubelet must not turn NotReady for its first period."""
    api = ReadyHistory()
    _, cache, health, recorder, clock = parts
    health.errors = []
    await manager(api, cache, health, recorder, clock).sync_node_status()  # before the restart
    before = list(api.reported)
    assert before and set(before) == {"True"}
    restarted_state = RuntimeState()  # nothing checked yet
    restarted = manager(api, cache, restarted_state, recorder, clock)
    checking, answered = asyncio.Event(), asyncio.Event()

    async def update_runtime_up() -> None:
        checking.set()
        await answered.wait()  # the runtime's Status call, on its way
        restarted_state.set_runtime_sync()

    async with new_kubelet(tmp_path, cluster=True) as kubelet:
        assert kubelet.cluster is not None
        cluster = dataclasses.replace(kubelet.cluster, node_status=restarted)
        loops = dict(cluster.tasks(update_runtime_up, kubelet.status_manager))
        loop = asyncio.create_task(loops["node-status"]())
        try:
            await turns(200, until=lambda: api.reported != before)
            assert api.reported == before, "a status was sent before the runtime check"
            assert checking.is_set()
            answered.set()
            await turns(200, until=lambda: api.reported != before)
            assert api.reported == [*before, "True"]
        finally:
            loop.cancel()


UNINITIALIZED = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true",
                 "effect": "NoSchedule"}
PROVIDED = "alpha.kubernetes.io/provided-node-ip"


def external_manager(api: FakeNodeAPI, cache: FakeCache, recorder: Recorder, clock: Clock,
                     node_ips: list[str], **options: Any) -> NodeStatusManager:
    """A manager of a ``--cloud-provider=external`` kubelet with the real address setter."""
    opts = NodeStatusOptions(node_name="n1", hostname="n1", external_cloud_provider=True,
                             **options)
    m = NodeStatusManager(opts, api, api, cache, recorder, clock=clock, sleep=no_sleep)
    m.set_setters([s.node_address(node_ips, "n1", external_cloud_provider=True)])
    return m


def cloud_controller_initializes(api: FakeNodeAPI, cache: FakeCache) -> None:
    """What the cloud controller manager does: its addresses, and the taint removed."""
    stored = api.nodes["n1"]
    stored["spec"]["taints"] = [t for t in stored["spec"]["taints"] if t != UNINITIALIZED]
    stored["status"]["addresses"] = [{"type": "InternalIP", "address": "10.0.0.5"},
                                     {"type": "ExternalIP", "address": "198.51.100.7"},
                                     {"type": "Hostname", "address": "vm-1234"}]
    cache.observe(from_dict(copy.deepcopy(stored), V1Node))


async def test_external_provider_registers_tainted_with_the_node_ip_annotation(
        parts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s, "validate_node_ip", lambda address: None)
    api, cache, _, recorder, clock = parts
    dedicated = V1Taint(key="dedicated", value="pyk", effect="NoSchedule")
    m = external_manager(api, cache, recorder, clock, ["192.0.2.10"],
                         register_with_taints=[dedicated])
    await m.sync_node_status()
    stored = api.nodes["n1"]
    assert stored["spec"]["taints"] == [
        {"key": "dedicated", "value": "pyk", "effect": "NoSchedule"}, UNINITIALIZED]
    assert stored["metadata"]["annotations"][PROVIDED] == "192.0.2.10"
    assert stored["status"]["addresses"] == [{"type": "InternalIP", "address": "192.0.2.10"},
                                             {"type": "Hostname", "address": "n1"}]

    cloud_controller_initializes(api, cache)
    clock.now += 600  # past nodeStatusReportFrequency: the status is written again
    await m.sync_node_status()
    assert api.calls[-1] == "patch"
    stored = api.nodes["n1"]
    assert [a["address"] for a in stored["status"]["addresses"]] == [
        "10.0.0.5", "198.51.100.7", "vm-1234"]
    assert stored["spec"]["taints"] == [
        {"key": "dedicated", "value": "pyk", "effect": "NoSchedule"}]
    assert stored["metadata"]["annotations"][PROVIDED] == "192.0.2.10"

    # A restarted kubelet finds the Node registered: the taint is not put back.
    again = external_manager(api, FakeCache(), recorder, clock, ["192.0.2.10"])
    await again.sync_node_status()
    assert UNINITIALIZED not in api.nodes["n1"]["spec"]["taints"]
    assert [a["address"] for a in api.nodes["n1"]["status"]["addresses"]] == [
        "10.0.0.5", "198.51.100.7", "vm-1234"]


async def test_without_external_provider_no_taint_and_a_stale_annotation_goes(
        parts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s, "validate_node_ip", lambda address: None)
    api, cache, _, recorder, clock = parts
    await external_manager(api, FakeCache(), recorder, clock, ["192.0.2.10"]).sync_node_status()
    assert PROVIDED in api.nodes["n1"]["metadata"]["annotations"]

    # Restarted without --cloud-provider: the first status write drops the annotation.
    plain = NodeStatusManager(NodeStatusOptions(node_name="n1", hostname="n1"), api, api,
                              cache, recorder, clock=clock, sleep=no_sleep)
    plain.set_setters([s.node_address(["192.0.2.10"], "n1")])
    await plain.sync_node_status()
    assert PROVIDED not in api.nodes["n1"]["metadata"].get("annotations", {})

    fresh = FakeNodeAPI()
    await manager(fresh, FakeCache(), Health(), recorder, clock).sync_node_status()
    assert not fresh.nodes["n1"]["spec"].get("taints")


async def test_birth_cry() -> None:
    recorder = Recorder()
    birth_cry(recorder, "n1")
    assert recorder.events == [("Node", "Normal", "Starting", "Starting kubelet.")]
