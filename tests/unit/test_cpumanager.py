"""The CPU manager: exclusive CPUs for Guaranteed pods, the shared pool, its checkpoint.

What a user would notice: which CPUs a container is created with and moved to, what
``cpu_manager_state`` holds (readable by the Go kubelet: upstream's checksum), which
pods are refused, and which restored states stop the kubelet.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from cri_api.v1 import api_pb2

from pykubelet.api import pod_from_dict
from pykubelet.cm.cpumanager import cpuset
from pykubelet.cm.cpumanager.cpu_manager import (
    CPUManager,
    CPUManagerError,
    new_cpu_manager,
    reserved_cpus,
)
from pykubelet.cm.cpumanager.cpuset import CPUSetError
from pykubelet.cm.cpumanager.state import CPUState, StateError, checksum
from pykubelet.cm.cpumanager.topology import (
    CPUInfo,
    CPUTopology,
    TopologyError,
    discover,
    take_by_topology,
)
from pykubelet.cm.topologymanager import AffinityStore, TopologyManager, new_topology_manager
from pykubelet.cmd.options import parse_command_line
from pykubelet.container import ContainerID, ContainerState, ContainerStatus, PodStatus
from pykubelet.kubelet.resources import node_reservations
from pykubelet.kuberuntime.container_config import ContainerOptions, container_resources
from pykubelet.lifecycle.admission import PodAdmitAttributes
from pykubelet.nodestatus.machine import read_machine_info
from tests.unit.fake_machine import write_fake_machine

# This machine's shape: one socket, two cores, no SMT.
TWO_CPUS = CPUTopology((CPUInfo(0, 0, 0), CPUInfo(1, 1, 0)))
FOUR_CPUS = CPUTopology(tuple(CPUInfo(cpu, cpu, 0) for cpu in range(4)))
# Two sockets of two cores with two threads each: cpu n and n+4 are siblings.
TWO_SOCKETS_HT = CPUTopology(tuple(
    CPUInfo(cpu, cpu % 4, (cpu % 4) // 2) for cpu in range(8)))


def pod(name: str, *containers: dict[str, Any], init: list[dict[str, Any]] | None = None
        ) -> Any:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return pod_from_dict({"metadata": {"name": name, "namespace": "default",
                                       "uid": f"uid-{name}"}, "spec": spec})


def container(name: str, cpu: str | None = None, *, guaranteed: bool = True,
              **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox", **extra}
    if cpu is not None:
        amount = {"cpu": cpu, "memory": "64Mi"}
        body["resources"] = ({"requests": amount, "limits": amount} if guaranteed
                             else {"requests": {"cpu": cpu}})
    return body


class RecordingRuntime:
    """The runtime seam: what ``UpdateContainerResources`` was asked."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, str]] = []

    async def update_container_resources(self, container_id: str,
                                         linux: api_pb2.LinuxContainerResources) -> None:
        self.updates.append((container_id, linux.cpuset_cpus))


class Node:
    """A CPU manager over fakes: the active pods and their running containers.

    Pods are admitted as the kubelet admits them: through the topology manager
    (``topology_policy``), with the CPU manager as its hint provider.
    """

    def __init__(self, root: Path, *, policy: str = "static", reserved: str = "0",
                 topology: CPUTopology = TWO_CPUS, sources_ready: bool = True,
                 topology_policy: str = "none", topology_scope: str = "container") -> None:
        self.root = root
        self.pods: list[Any] = []
        self.statuses: dict[str, PodStatus] = {}
        self.runtime = RecordingRuntime()
        self.ready = sources_ready
        affinity = AffinityStore()
        self.manager: CPUManager = new_cpu_manager(
            policy_name=policy, root_dir=str(root), reserved_system_cpus=reserved,
            kube_reserved={}, system_reserved={}, reconcile_period=10.0,
            runtime_service=self.runtime,  # type: ignore[arg-type]
            active_pods=lambda: list(self.pods), pod_status=self.statuses.get,
            sources_ready=lambda: self.ready, affinity=affinity, topology=topology)
        self.topology_manager: TopologyManager = new_topology_manager(
            policy_name=topology_policy, scope_name=topology_scope,
            numa_nodes=topology.numa_nodes(), hint_providers=[self.manager], store=affinity)

    def admit(self, candidate: Any) -> tuple[bool, str, str]:
        others = [p for p in self.pods if p.metadata.uid != candidate.metadata.uid]
        result = asyncio.run(self.topology_manager.admit(PodAdmitAttributes(candidate, others)))
        if result.admit and candidate not in self.pods:
            self.pods.append(candidate)
        return result.admit, result.reason, result.message

    def run(self, candidate: Any) -> None:
        """Admitted, and each of its containers running."""
        assert self.admit(candidate)[0]
        uid = candidate.metadata.uid
        self.statuses[uid] = PodStatus(id=uid, container_statuses=[
            ContainerStatus(id=ContainerID("containerd", f"{uid}-{c.name}"), name=c.name,
                            state=ContainerState.RUNNING) for c in candidate.spec.containers])

    def remove(self, name: str) -> None:
        self.pods = [p for p in self.pods if p.metadata.name != name]
        self.statuses.pop(f"uid-{name}", None)

    def cpus(self, name: str, container_name: str = "c") -> str:
        return self.manager.cpuset_for(
            next(p for p in self.pods if p.metadata.name == name), container_name)

    def state_file(self) -> dict[str, Any]:
        return dict(json.loads((self.root / "cpu_manager_state").read_text()))


# --- cpusets ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "cpus"), [
    ("", set()), ("0", {0}), ("0-3", {0, 1, 2, 3}), ("0,2-3,7", {0, 2, 3, 7}),
    ("1,3,5", {1, 3, 5})])
def test_cpusets_parse_and_print_in_the_kernel_list_syntax(text: str, cpus: set[int]) -> None:
    assert cpuset.parse(text) == cpus
    assert cpuset.format(cpus) == text


def test_cpuset_text_is_canonical_whatever_the_input() -> None:
    assert cpuset.format(cpuset.parse("3,0-1,2,7,6")) == "0-3,6-7"


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1-2-3", "1,,2", " 1"])
def test_malformed_cpusets_are_refused(text: str) -> None:
    with pytest.raises(CPUSetError):
        cpuset.parse(text)


# --- topology -----------------------------------------------------------------------------------

def test_topology_is_read_from_sysfs_as_cadvisor_reads_it(tmp_path: Path) -> None:
    sys_cpu = tmp_path / "sys/devices/system/cpu"
    sys_cpu.mkdir(parents=True)
    (sys_cpu / "online").write_text("0-3\n")
    for cpu, (socket, core) in enumerate([(0, 0), (0, 1), (0, 0), (0, 1)]):
        topo = sys_cpu / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{socket}\n")
        (topo / "core_id").write_text(f"{core}\n")
    sys_node = tmp_path / "sys/devices/system/node"
    for node, cpus in (("node0", "0-1"), ("node1", "2-3")):
        (sys_node / node).mkdir(parents=True)
        (sys_node / node / "cpulist").write_text(f"{cpus}\n")
    (sys_node / "online").write_text("0-1\n")
    found = discover(str(tmp_path))
    assert found.all_cpus() == {0, 1, 2, 3}
    assert found.core_cpus(found.info(0).core) == {0, 2}
    assert found.numa_nodes() == [0, 1]
    assert found.numa_node_cpus([1]) == {2, 3}


def test_without_numa_in_sysfs_each_socket_is_a_numa_node(tmp_path: Path) -> None:
    """cadvisor's fallback when the kernel has no /sys/devices/system/node."""
    write_fake_machine(tmp_path, numa_nodes={0: [0], 1: [1]}, with_numa_dirs=False)
    assert not (tmp_path / "sys/devices/system/node").exists()
    found = discover(str(tmp_path))
    assert found.numa_nodes() == [0, 1]
    assert found.numa_node_cpus([1]) == {1}


def test_a_fake_two_numa_machine_is_what_the_kubelet_reads(tmp_path: Path) -> None:
    """The fake machine tests hand the whole kubelet: its topology and its machine info."""
    write_fake_machine(tmp_path, numa_nodes={0: [0, 1, 2, 3], 1: [4, 5, 6, 7]},
                       threads_per_core=2, memory_bytes=4 * 1024 ** 3, boot_id="b-1")
    found = discover(str(tmp_path))
    assert found.numa_nodes() == [0, 1]
    assert found.numa_node_cpus([1]) == {4, 5, 6, 7}
    assert found.core_cpus(found.info(5).core) == {4, 5}
    assert {found.info(cpu).socket for cpu in range(8)} == {0, 1}
    info = read_machine_info(str(tmp_path))
    assert (info.num_cores, info.memory_capacity, info.boot_id) == (8, 4 * 1024 ** 3, "b-1")


def test_a_machine_whose_cpus_cannot_be_read_is_a_topology_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="could not detect number of cpus"):
        discover(str(tmp_path))


def test_this_machine_topology_lists_every_online_cpu() -> None:
    import os
    assert len(discover().all_cpus()) == os.cpu_count()
    assert discover().numa_nodes()  # at least one NUMA node, whatever the kernel has


def test_taking_cpus_packs_whole_cores_then_fills_partly_used_ones() -> None:
    everything = TWO_SOCKETS_HT.all_cpus()
    assert take_by_topology(TWO_SOCKETS_HT, everything, 2) == {0, 4}  # one whole core
    assert take_by_topology(TWO_SOCKETS_HT, everything, 4) == {0, 1, 4, 5}  # one socket
    # A lone free thread on a busy core goes before breaking up a free core.
    assert take_by_topology(TWO_SOCKETS_HT, everything - {0}, 1) == {4}
    assert take_by_topology(TWO_CPUS, frozenset({0, 1}), 1) == {0}


def test_taking_more_cpus_than_are_free_fails_with_upstreams_message() -> None:
    with pytest.raises(TopologyError, match="not enough cpus available to satisfy request: "
                                            "requested=3, available=2"):
        take_by_topology(TWO_CPUS, frozenset({0, 1}), 3)


# --- reserved CPUs ------------------------------------------------------------------------------

def test_kube_and_system_reserved_cpu_round_up_to_whole_cpus() -> None:
    assert reserved_cpus(reserved_system_cpus="", kube_reserved={"cpu": "500m"},
                         system_reserved={"cpu": "600m"}, topology=TWO_SOCKETS_HT) == {0, 4}
    assert reserved_cpus(reserved_system_cpus="1", kube_reserved={"cpu": "2"},
                         system_reserved={}, topology=TWO_CPUS) == {1}


def test_the_static_policy_without_reserved_cpus_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CPUManagerError, match="the static policy requires systemreserved.cpu "
                                              r"\+ kubereserved.cpu to be greater than zero"):
        Node(tmp_path, reserved="")


# --- the static policy --------------------------------------------------------------------------

def test_a_guaranteed_whole_cpu_container_gets_a_cpu_of_its_own(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    assert node.state_file()["defaultCpuSet"] == "0-1"
    node.run(pod("g", container("c", "1")))
    node.run(pod("b", container("c", "100m", guaranteed=False)))
    node.run(pod("f", container("c", "500m")))  # Guaranteed, but not whole CPUs
    assert node.cpus("g") == "1"
    assert node.cpus("b") == node.cpus("f") == "0"  # the shared pool keeps the reserved CPU
    written = node.state_file()
    assert written["policyName"] == "static"
    assert written["defaultCpuSet"] == "0"
    assert written["entries"] == {"uid-g": {"c": "1"}}
    assert written["checksum"] == checksum("static", "0", {"uid-g": {"c": "1"}})


def test_reserved_cpus_are_never_handed_out(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    node.run(pod("g", container("c", "1")))
    assert node.admit(pod("h", container("c", "1"))) == (
        False, "UnexpectedAdmissionError",
        "Allocate failed due to not enough cpus available to satisfy request: requested=1, "
        "available=0, which is unexpected")
    assert node.cpus("g") == "1"


def test_readmission_keeps_the_assignment(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    first = pod("g", container("c", "1"))
    node.run(first)
    assert node.admit(first)[0]
    assert node.cpus("g") == "1"
    assert node.state_file()["defaultCpuSet"] == "0"


def test_a_restored_assignment_survives_the_pods_readmission(tmp_path: Path) -> None:
    node = Node(tmp_path, topology=FOUR_CPUS)
    node.manager.start()
    guaranteed = pod("g", container("c", "1"))
    node.run(pod("a", container("c", "1")))
    node.run(guaranteed)
    assert node.cpus("g") == "2"
    # A restart where only g comes back: no pod is active yet when it is admitted.
    again = Node(tmp_path, topology=FOUR_CPUS)
    again.manager.start()
    assert again.admit(guaranteed)[0]
    assert again.cpus("g") == "2"
    assert again.state_file()["entries"] == {"uid-g": {"c": "2"}}  # a's CPU released


def test_an_app_container_reuses_its_init_containers_cpus(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    node.run(pod("g", container("c", "1"), init=[container("setup", "1")]))
    assert node.cpus("g", "setup") == node.cpus("g", "c") == "1"
    node.remove("g")
    node.manager.remove_stale_state()
    assert node.state_file() == {"policyName": "static", "defaultCpuSet": "0-1",
                                 "checksum": checksum("static", "0-1", {})}


def test_a_gone_pods_cpus_return_to_the_shared_pool(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    node.run(pod("g", container("c", "1")))
    node.remove("g")
    node.ready = False
    node.manager.remove_stale_state()  # sources not ready: the active pods are not all known
    assert node.state_file()["entries"] == {"uid-g": {"c": "1"}}
    node.ready = True
    node.manager.remove_stale_state()
    assert "entries" not in node.state_file()
    assert node.state_file()["defaultCpuSet"] == "0-1"


def test_reconcile_moves_running_shared_containers_with_the_pool(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    node.run(pod("b", container("c", "100m", guaranteed=False)))
    asyncio.run(node.manager.reconcile())
    assert node.runtime.updates == [("uid-b-c", "0-1")]
    node.run(pod("g", container("c", "1")))
    asyncio.run(node.manager.reconcile())
    assert node.runtime.updates[1:] == [("uid-b-c", "0"), ("uid-g-c", "1")]
    asyncio.run(node.manager.reconcile())  # nothing changed: nothing sent
    assert len(node.runtime.updates) == 3
    node.remove("g")
    asyncio.run(node.manager.reconcile())
    assert node.runtime.updates[3:] == [("uid-b-c", "0-1")]


def test_the_none_policy_gives_no_cpuset_and_runs_no_loop(tmp_path: Path) -> None:
    node = Node(tmp_path, policy="none", reserved="")
    node.manager.start()
    node.run(pod("g", container("c", "1")))
    assert node.cpus("g") == ""
    assert not node.manager.reconciles
    assert node.state_file() == {"policyName": "none", "defaultCpuSet": "",
                                 "checksum": checksum("none", "", {})}


def test_containers_are_created_with_the_managers_cpuset(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    guaranteed = pod("g", container("c", "1"))
    node.run(guaranteed)
    options = ContainerOptions(pod_dir=str(tmp_path), cpuset_for=node.manager.cpuset_for)
    assert container_resources(guaranteed, guaranteed.spec.containers[0],
                               options).cpuset_cpus == "1"
    plain = ContainerOptions(pod_dir=str(tmp_path))
    assert container_resources(guaranteed, guaranteed.spec.containers[0],
                               plain).cpuset_cpus == ""


# --- topology hints and NUMA-aligned allocation ------------------------------------------------

# Two NUMA nodes of two CPUs each (one socket per node): 0-1 on node 0, 2-3 on node 1.
TWO_NUMA_NODES = CPUTopology(tuple(CPUInfo(cpu, cpu, cpu // 2, cpu // 2) for cpu in range(4)))


def cpu_hints(node: Node, candidate: Any, container_name: str = "c") -> list[str] | None:
    """The CPU manager's hints for one container, as "<nodes> <preferred>"."""
    found = next(c for c in candidate.spec.containers if c.name == container_name)
    hints = node.manager.get_topology_hints(candidate, found)
    if hints is None:
        return None
    return [f"{hint.affinity.bits() if hint.affinity else None} {hint.preferred}"
            for hint in hints["cpu"] or []]


def test_static_hints_name_each_numa_set_that_fits_preferring_the_fewest_nodes(
        tmp_path: Path) -> None:
    node = Node(tmp_path, topology=TWO_NUMA_NODES)  # CPU 0 reserved
    node.manager.start()
    # One CPU: node 0 (CPU 1) or node 1 alone, both preferred; both nodes is wider.
    assert cpu_hints(node, pod("a", container("c", "1"))) == [
        "[0] True", "[1] True", "[0, 1] False"]
    # Two: node 0 has only one free CPU left, so node 1 alone or both.
    assert cpu_hints(node, pod("b", container("c", "2"))) == ["[1] True", "[0, 1] False"]
    # Three fit no single node on this machine: both nodes is as narrow as it gets.
    assert cpu_hints(node, pod("c", container("c", "3"))) == ["[0, 1] True"]
    # Four: only three are free anywhere, a request no NUMA set can meet.
    assert cpu_hints(node, pod("d", container("c", "4"))) == []
    # Shared-pool containers have no preference at all.
    assert cpu_hints(node, pod("e", container("c", "500m"))) is None
    assert cpu_hints(node, pod("f", container("c", "1", guaranteed=False))) is None


def test_the_none_cpu_policy_gives_no_hints(tmp_path: Path) -> None:
    node = Node(tmp_path, policy="none", reserved="", topology=TWO_NUMA_NODES)
    node.manager.start()
    assert cpu_hints(node, pod("a", container("c", "1"))) is None


def test_a_container_holding_cpus_gets_the_hints_of_what_it_holds(tmp_path: Path) -> None:
    node = Node(tmp_path, topology=TWO_NUMA_NODES, topology_policy="single-numa-node")
    node.manager.start()
    held = pod("g", container("c", "2"))
    node.run(held)
    assert node.cpus("g") == "2-3"
    assert cpu_hints(node, held) == ["[1] True", "[0, 1] False"]
    # Asked for a different number than it holds (a changed spec): nothing can meet it.
    resized = pod("g", container("c", "1"))
    assert cpu_hints(node, resized) == []


def test_single_numa_node_places_each_container_on_one_node_or_refuses_the_pod(
        tmp_path: Path) -> None:
    node = Node(tmp_path, topology=TWO_NUMA_NODES, topology_policy="single-numa-node")
    node.manager.start()
    node.run(pod("one", container("c", "1")))
    assert node.cpus("one") == "1"  # node 0, the lower of two equally narrow choices
    node.run(pod("two", container("c", "2")))
    assert node.cpus("two") == "2-3"  # node 1, the only node with two free CPUs
    assert node.admit(pod("three", container("c", "1"))) == (
        False, "TopologyAffinityError", "Resources cannot be allocated with Topology locality")
    assert "uid-three" not in node.state_file()["entries"]


def numa_node(root: Path, topology_policy: str, topology_scope: str = "container") -> Node:
    root.mkdir()
    node = Node(root, topology=TWO_NUMA_NODES, topology_policy=topology_policy,
                topology_scope=topology_scope)
    node.manager.start()
    return node


@pytest.mark.parametrize("topology_policy", ["best-effort", "restricted"])
def test_a_request_no_single_node_can_hold_spans_nodes_unless_single_numa_node(
        tmp_path: Path, topology_policy: str) -> None:
    spread = numa_node(tmp_path / "spread", topology_policy)
    spread.run(pod("three", container("c", "3")))
    assert spread.cpus("three") == "1-3"
    single = numa_node(tmp_path / "single", "single-numa-node")
    assert single.admit(pod("three", container("c", "3")))[1] == "TopologyAffinityError"


def test_pod_scope_keeps_all_of_a_pods_containers_on_one_node(tmp_path: Path) -> None:
    two_containers = [container("a", "1"), container("b", "1")]
    per_container = numa_node(tmp_path / "container", "single-numa-node")
    per_container.run(pod("p", *two_containers))
    # Each container alone fits node 0's one free CPU: the pod is split over both nodes.
    assert (per_container.cpus("p", "a"), per_container.cpus("p", "b")) == ("1", "2")

    per_pod = numa_node(tmp_path / "pod", "single-numa-node", topology_scope="pod")
    per_pod.run(pod("p", *two_containers))
    assert (per_pod.cpus("p", "a"), per_pod.cpus("p", "b")) == ("2", "3")
    hint = per_pod.topology_manager.get_affinity("uid-p", "b")
    assert hint.affinity is not None and hint.affinity.bits() == [1]


def test_pod_hints_count_sidecars_beside_app_containers(tmp_path: Path) -> None:
    node = Node(tmp_path, topology=TWO_NUMA_NODES)
    node.manager.start()
    sidecar = container("proxy", "1", restartPolicy="Always")
    with_sidecar = pod("s", container("c", "1"), init=[container("setup", "2"), sidecar])
    # The peak is the setup container (2) or the sidecar with the app container (2).
    hints = node.manager.get_pod_topology_hints(with_sidecar)
    assert hints is not None
    assert [(h.affinity.bits() if h.affinity else None, h.preferred)
            for h in hints["cpu"] or []] == [([1], True), ([0, 1], False)]



def test_the_checksum_is_upstreams() -> None:
    # Upstream's own test vectors (state_checkpoint_test.go).
    assert checksum("none", "4-6", {}) == 354655845
    assert checksum("none", "1-3", {"pod": {"container1": "4-6",
                                            "container2": "1-3"}}) == 3610638499


def test_the_state_survives_a_restart(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.manager.start()
    node.run(pod("g", container("c", "1")))
    again = Node(tmp_path)
    again.manager.start()
    assert again.manager.state.assignments == {"uid-g": {"c": frozenset({1})}}
    assert again.manager.state.default_cpu_set == {0}


def test_an_upstream_written_checkpoint_is_read(tmp_path: Path) -> None:
    (tmp_path / "cpu_manager_state").write_text(json.dumps({
        "policyName": "none", "defaultCPUSet": "1-3",
        "entries": {"pod": {"container1": "4-6", "container2": "1-3"}},
        "checksum": 3610638499}))
    state = CPUState(str(tmp_path / "cpu_manager_state"), "none")
    state.restore()
    assert state.assignments["pod"]["container1"] == {4, 5, 6}


def refused(tmp_path: Path, content: dict[str, Any], *, policy: str = "static") -> str:
    (tmp_path / "cpu_manager_state").write_text(json.dumps(content))
    node = Node(tmp_path, policy=policy, reserved="0" if policy == "static" else "")
    with pytest.raises(CPUManagerError) as caught:
        node.manager.start()
    return str(caught.value)


def test_a_checkpoint_of_another_policy_stops_the_kubelet(tmp_path: Path) -> None:
    message = refused(tmp_path, {"policyName": "none", "defaultCpuSet": "", "checksum": 0})
    path = tmp_path / "cpu_manager_state"
    assert message == (
        'start cpu manager error: could not restore state from checkpoint: configured policy '
        '"static" differs from state checkpoint policy "none", please drain this node and '
        f'delete the CPU manager checkpoint file "{path}" before restarting Kubelet')


def test_a_tampered_checkpoint_is_corrupt(tmp_path: Path) -> None:
    content = {"policyName": "static", "defaultCpuSet": "0-1",
               "checksum": checksum("static", "0", {})}
    assert "checkpoint is corrupted" in refused(tmp_path, content)


@pytest.mark.parametrize(("default", "entries", "problem"), [
    ("1", {"p": {"c": "0"}}, 'not all reserved cpus: "0" are present in defaultCpuSet: "1"'),
    ("0-1", {"p": {"c": "1"}},
     'pod: p, container: c cpuset: "1" overlaps with default cpuset "0-1"'),
    ("0", {}, 'current set of available CPUs "0-1" doesn\'t match with CPUs in state "0"'),
    ("0-3", {}, 'current set of available CPUs "0-1" doesn\'t match with CPUs in state "0-3"'),
])
def test_a_checkpoint_that_does_not_fit_the_machine_stops_the_kubelet(
        tmp_path: Path, default: str, entries: dict[str, dict[str, str]], problem: str) -> None:
    content: dict[str, Any] = {"policyName": "static", "defaultCpuSet": default,
                               "entries": entries, "checksum": checksum("static", default,
                                                                        entries)}
    assert refused(tmp_path, content) == f"start cpu manager error: {problem}"


def test_an_unreadable_checkpoint_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "cpu_manager_state").write_text("{")
    state = CPUState(str(tmp_path / "cpu_manager_state"), "static")
    with pytest.raises(StateError, match="checkpoint is corrupted, please drain this node"):
        state.restore()


def test_reserved_system_cpus_replace_the_cpu_reservations_in_node_allocatable(
        tmp_path: Path) -> None:
    """Upstream's server.go: the CPUs kept for the system are the cpu reservation."""
    server = parse_command_line([f"--root-dir={tmp_path}", "--reserved-cpus=0-1",
                                 "--kube-reserved=cpu=500m,memory=1Gi",
                                 "--system-reserved=cpu=250m"])
    assert node_reservations(server) == ({"cpu": "2"}, {"memory": "1Gi"})
    plain = parse_command_line([f"--root-dir={tmp_path}", "--kube-reserved=cpu=500m"])
    assert node_reservations(plain) == ({}, {"cpu": "500m"})


# --- reusing what finished init containers held (upstream's cpusToReuse) ------------------------

def test_later_init_containers_and_the_app_reuse_earlier_init_containers_cpus(
        tmp_path: Path) -> None:
    """Init containers run one at a time: 2 + 2 + 2 CPUs fit in 3 exclusive ones."""
    node = Node(tmp_path, topology=FOUR_CPUS)  # CPU 0 reserved: 1-3 exclusive
    node.manager.start()
    node.run(pod("g", container("c", "2"),
                 init=[container("first", "2"), container("second", "2")]))
    assert [node.cpus("g", name) for name in ("first", "second", "c")] == ["1-2"] * 3
    assert node.state_file()["defaultCpuSet"] == "0,3"


def test_a_sidecars_cpus_are_not_reused_by_later_containers(tmp_path: Path) -> None:
    """A sidecar keeps running beside what starts after it: its CPUs stay its own."""
    node = Node(tmp_path, topology=FOUR_CPUS)
    node.manager.start()
    sidecar = container("proxy", "1", restartPolicy="Always")
    node.run(pod("g", container("c", "2"), init=[sidecar, container("setup", "2")]))
    assert node.cpus("g", "proxy") == "1"
    assert node.cpus("g", "setup") == node.cpus("g", "c") == "2-3"
    assert node.state_file()["defaultCpuSet"] == "0"


def test_single_numa_node_admits_init_containers_that_reuse_an_earlier_ones_node(
        tmp_path: Path) -> None:
    """The hints of a later init container count the CPUs it may reuse."""
    node = Node(tmp_path, topology=TWO_NUMA_NODES, topology_policy="single-numa-node")
    node.manager.start()
    node.run(pod("g", container("c", "2"),
                 init=[container("first", "2"), container("second", "2")]))
    assert [node.cpus("g", name) for name in ("first", "second", "c")] == ["2-3"] * 3
