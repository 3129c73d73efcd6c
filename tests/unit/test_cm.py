"""Container manager: cgroup names per driver, v1/v2 file formats, pod limits, node allocatable."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from kubernetes_asyncio.client import (
    V1Container,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
)

from pykubelet.cm import (
    Capacity,
    CgroupManager,
    ContainerManager,
    ContainerManagerError,
    NodeConfig,
    ResourceConfig,
    check_cgroup_version,
    resource_config_for_pod,
    runtime_cgroup_driver_from_status_info,
)
from pykubelet.cm.cgroups import (
    V1,
    V2,
    parse_systemd_name,
    parse_v2_cpu_max,
    to_cgroupfs,
    to_systemd,
    v1_files,
    v2_files,
)
from pykubelet.cm.helpers import cpu_shares_to_weight, milli_cpu_to_quota, milli_cpu_to_shares
from pykubelet.config.units import parse_eviction_thresholds
from testsupport.kubelet_process import write_kernel_tunables


def pod(*containers: tuple[dict[str, str] | None, dict[str, str] | None], uid: str = "",
        init: list[tuple[dict[str, str] | None, dict[str, str] | None]] | None = None) -> V1Pod:
    def make(index: int, requests: dict[str, str] | None,
             limits: dict[str, str] | None, prefix: str = "c") -> V1Container:
        return V1Container(name=f"{prefix}{index}", image="busybox",
                           resources=V1ResourceRequirements(requests=requests, limits=limits))
    return V1Pod(
        metadata=V1ObjectMeta(name="p", namespace="default", uid=uid or str(uuid.uuid4())),
        spec=V1PodSpec(containers=[make(i, r, lim) for i, (r, lim) in enumerate(containers)],
                       init_containers=[make(i, r, lim, "i") for i, (r, lim) in
                                        enumerate(init or [])] or None))


# --- names ---------------------------------------------------------------------------------

def test_cgroupfs_and_systemd_names_follow_upstream() -> None:
    name = ("kubepods", "burstable", "pod1234-5678")
    assert to_cgroupfs(name) == "/kubepods/burstable/pod1234-5678"
    assert to_systemd(name) == ("/kubepods.slice/kubepods-burstable.slice/"
                                "kubepods-burstable-pod1234_5678.slice")
    assert to_systemd(()) == "/"
    assert parse_systemd_name("kubepods-burstable-pod1234_5678.slice") == name


def test_pod_cgroup_parent_per_driver_and_qos() -> None:
    guaranteed = pod(({"cpu": "1", "memory": "64Mi"}, {"cpu": "1", "memory": "64Mi"}),
                     uid="aaaa-bbbb")
    besteffort = pod((None, None), uid="cccc-dddd")
    cgroupfs = ContainerManager(NodeConfig(cgroup_root="/"),
                                CgroupManager("cgroupfs", version=V1), Capacity({}))
    assert cgroupfs.pod_cgroup_parent(guaranteed) == "/kubepods/podaaaa-bbbb"
    assert cgroupfs.pod_cgroup_parent(besteffort) == "/kubepods/besteffort/podcccc-dddd"
    systemd = ContainerManager(NodeConfig(cgroup_root="/", cgroup_driver="systemd"),
                               CgroupManager("systemd", version=V1), Capacity({}))
    assert systemd.pod_cgroup_parent(besteffort) == (
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podcccc_dddd.slice")
    rooted = ContainerManager(NodeConfig(cgroup_root="/custom"),
                              CgroupManager("cgroupfs", version=V1), Capacity({}))
    assert rooted.pod_cgroup_parent(besteffort) == "/custom/kubepods/besteffort/podcccc-dddd"


# --- conversions and file formats ---------------------------------------------------------------

def test_cpu_conversions_clamp_as_the_kernel_requires() -> None:
    assert milli_cpu_to_shares(0) == 2
    assert milli_cpu_to_shares(1) == 2
    assert milli_cpu_to_shares(500) == 512
    assert milli_cpu_to_shares(10**9) == 262144
    assert milli_cpu_to_quota(0, 100_000) == 0
    assert milli_cpu_to_quota(1, 100_000) == 1000  # the kernel's 1 ms minimum
    assert milli_cpu_to_quota(250, 100_000) == 25_000
    assert cpu_shares_to_weight(2) == 1
    assert cpu_shares_to_weight(1024) == 39
    assert cpu_shares_to_weight(262144) == 10000


def test_v1_and_v2_files_for_a_limited_cgroup() -> None:
    config = ResourceConfig(cpu_shares=512, cpu_quota=50_000, cpu_period=100_000,
                            memory=64 * 2**20, pids_limit=100)
    assert v1_files(config) == {
        ("cpu", "cpu.shares"): "512", ("cpu", "cpu.cfs_period_us"): "100000",
        ("cpu", "cpu.cfs_quota_us"): "50000", ("memory", "memory.limit_in_bytes"): "67108864",
        ("pids", "pids.max"): "100"}
    assert list(v1_files(config))[1:3] == [("cpu", "cpu.cfs_period_us"),
                                           ("cpu", "cpu.cfs_quota_us")]
    assert v2_files(config) == {"cpu.weight": "20", "cpu.max": "50000 100000",
                                "memory.max": "67108864", "pids.max": "100"}


def test_v1_and_v2_files_for_unlimited_values() -> None:
    config = ResourceConfig(cpu_shares=2, cpu_quota=-1, cpu_period=100_000, memory=-1,
                            pids_limit=-1)
    assert v1_files(config)[("cpu", "cpu.cfs_quota_us")] == "-1"
    assert v1_files(config)[("memory", "memory.limit_in_bytes")] == "-1"
    assert v1_files(config)[("pids", "pids.max")] == "max"
    assert v2_files(config) == {"cpu.weight": "1", "cpu.max": "max 100000", "memory.max": "max",
                                "pids.max": "max"}
    assert v1_files(ResourceConfig()) == {} and v2_files(ResourceConfig()) == {}
    assert parse_v2_cpu_max("max 100000") == (-1, 100000)
    assert parse_v2_cpu_max("50000 100000\n") == (50000, 100000)


# --- pod resource config -----------------------------------------------------------------------

def test_guaranteed_pod_gets_shares_quota_and_memory() -> None:
    config = resource_config_for_pod(
        pod(({"cpu": "500m", "memory": "64Mi"}, {"cpu": "500m", "memory": "64Mi"}),
            ({"cpu": "250m", "memory": "32Mi"}, {"cpu": "250m", "memory": "32Mi"})),
        pids_limit=50)
    assert config == ResourceConfig(cpu_shares=768, cpu_quota=75_000, cpu_period=100_000,
                                    memory=96 * 2**20, pids_limit=50)


def test_burstable_pod_limits_only_what_every_container_limits() -> None:
    partly = pod(({"cpu": "100m"}, {"cpu": "200m", "memory": "64Mi"}), (None, {"cpu": "100m"}))
    config = resource_config_for_pod(partly)
    # Both containers limit cpu; only one limits memory, so the pod's memory is unlimited.
    assert config == ResourceConfig(cpu_shares=204, cpu_quota=30_000, cpu_period=100_000)
    unbounded = resource_config_for_pod(pod(({"memory": "10Mi"}, None)))
    assert unbounded == ResourceConfig(cpu_shares=2)


def test_init_containers_count_with_their_peak() -> None:
    config = resource_config_for_pod(
        pod(({"cpu": "100m"}, None), init=[({"cpu": "1"}, None)]))
    assert config.cpu_shares == 1024


def test_best_effort_pod_gets_minimum_shares_only() -> None:
    assert resource_config_for_pod(pod((None, None)), pids_limit=-1) == ResourceConfig(
        cpu_shares=2)


def test_cpu_cfs_quota_disabled_leaves_cpu_unthrottled() -> None:
    config = resource_config_for_pod(
        pod(({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})),
        enforce_cpu_limits=False)
    assert config.cpu_quota == -1


def test_burstable_qos_shares_sum_its_pods_requests() -> None:
    manager = ContainerManager(NodeConfig(), CgroupManager("cgroupfs", version=V1), Capacity({}))
    configs = manager.qos_configs([
        pod(({"cpu": "200m"}, None)), pod(({"cpu": "300m"}, {"cpu": "1"})),
        pod((None, None)),
        pod(({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}))])
    assert configs["Burstable"].cpu_shares == 512
    assert configs["BestEffort"].cpu_shares == 2


# --- node allocatable and start-up checks ---------------------------------------------------------

GiB = 2**30


def manager_with(capacity_memory: int = 8 * GiB, **config: object) -> ContainerManager:
    hard = parse_eviction_thresholds(dict(config.pop("eviction_hard", {})), {}, {}, {})  # type: ignore[call-overload]
    node = NodeConfig(hard_eviction_thresholds=hard, **config)  # type: ignore[arg-type]
    capacity = Capacity({"cpu": Fraction(4000), "memory": Fraction(capacity_memory),
                         "ephemeral-storage": Fraction(100 * GiB), "pid": Fraction(4096)})
    return ContainerManager(node, CgroupManager("cgroupfs", version=V1), capacity)


def test_allocatable_subtracts_reservations_and_hard_eviction() -> None:
    manager = manager_with(system_reserved={"cpu": "500m", "memory": "1Gi"},
                           kube_reserved={"memory": "512Mi"},
                           eviction_hard={"memory.available": "100Mi", "nodefs.available": "10%"})
    allocatable = manager.allocatable()
    assert allocatable["cpu"] == 3500
    assert allocatable["memory"] == 8 * GiB - GiB - 512 * 2**20 - 100 * 2**20
    # 10% is a float32 fraction, as upstream's: a tenth and a few bytes.
    assert allocatable["ephemeral-storage"] == 100 * GiB - int(100 * GiB * 0.10000000149011612)
    # kubepods itself is limited without the eviction thresholds, as upstream.
    absolute = manager.allocatable_absolute()
    assert absolute["memory"] == 8 * GiB - GiB - 512 * 2**20
    assert absolute["pid"] == 4096


def test_reservations_larger_than_capacity_are_a_start_up_error() -> None:
    manager = manager_with(capacity_memory=2 * GiB, system_reserved={"memory": "1Gi"},
                           kube_reserved={"memory": "1Gi"},
                           eviction_hard={"memory.available": "100Mi"})
    with pytest.raises(ContainerManagerError) as caught:
        manager.validate_node_allocatable()
    message = str(caught.value)
    assert "systemReserved" in message and "kubeReserved" in message
    assert "Resource 'memory' has a reservation of 2252341248 but capacity of 2147483648" in message


def test_a_reservation_that_does_not_parse_names_its_field() -> None:
    manager = manager_with(kube_reserved={"memory": "lots"})
    with pytest.raises(ContainerManagerError, match=r"kubeReserved\[memory\]"):
        manager.validate_node_allocatable()


def test_fail_cgroup_v1_refuses_v1_with_upstreams_message() -> None:
    with pytest.raises(ContainerManagerError,
                       match="kubelet is configured to not run on a host using cgroup v1"):
        check_cgroup_version(True, V1)
    check_cgroup_version(False, V1)  # warns only
    check_cgroup_version(True, V2)


def test_runtime_driver_is_read_from_containerds_status_and_compared() -> None:
    info = {"config": json.dumps({"containerd": {
        "defaultRuntimeName": "runc",
        "runtimes": {"runc": {"options": {"SystemdCgroup": False}}}}})}
    assert runtime_cgroup_driver_from_status_info(info) == "cgroupfs"
    assert runtime_cgroup_driver_from_status_info({}) is None
    manager = manager_with(cgroup_driver="systemd")
    with pytest.raises(ContainerManagerError, match="cgroupDriver"):
        manager.check_runtime_driver("cgroupfs")
    manager.check_runtime_driver(None)
    manager_with().check_runtime_driver("cgroupfs")


# --- the real cgroup filesystem ---------------------------------------------------------------

needs_v1_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/memory"),
    reason="needs root on a cgroup v1 host")


@pytest.fixture
def cgroup_root() -> Iterator[str]:
    """A private cgroupRoot in every v1 controller, removed afterwards with all below it."""
    name = f"/pykubelet-test-{uuid.uuid4().hex[:8]}"
    cgroups = CgroupManager("cgroupfs")
    cgroups.create((name.strip("/"),))
    try:
        yield name
    finally:
        cgroups.destroy((name.strip("/"),))


def read(controller: str, path: str, filename: str) -> str:
    return Path(f"/sys/fs/cgroup/{controller}{path}/{filename}").read_text().strip()


@needs_v1_root
def test_hierarchy_pod_cgroup_and_cleanup_on_the_hosts_cgroups(cgroup_root: str,
                                                                tmp_path: Path) -> None:
    pods: list[V1Pod] = []
    manager = ContainerManager(
        NodeConfig(cgroup_root=cgroup_root, system_reserved={"memory": "1Gi"},
                   pod_pids_limit=64),
        active_pods=lambda: pods, sysctl_dir=str(write_kernel_tunables(tmp_path)))
    manager.start()
    kubepods = f"{cgroup_root}/kubepods"
    capacity = manager.capacity.values
    assert int(read("memory", kubepods, "memory.limit_in_bytes")) == (
        (int(capacity["memory"]) - GiB) // 4096 * 4096)
    assert read("cpu", f"{kubepods}/besteffort", "cpu.shares") == "2"
    assert os.path.isdir(f"/sys/fs/cgroup/pids{kubepods}/burstable")

    guaranteed = pod(({"cpu": "250m", "memory": "64Mi"}, {"cpu": "250m", "memory": "64Mi"}))
    burstable = pod(({"cpu": "300m"}, None))
    pods.extend([guaranteed, burstable])
    for each in pods:
        manager.ensure_pod_cgroup(each)
    g = manager.pod_cgroup_parent(guaranteed)
    assert g == f"{kubepods}/pod{guaranteed.metadata.uid}"
    assert read("cpu", g, "cpu.shares") == "256"
    assert read("cpu", g, "cpu.cfs_quota_us") == "25000"
    assert read("memory", g, "memory.limit_in_bytes") == str(64 * 2**20)
    assert read("pids", g, "pids.max") == "64"
    b = manager.pod_cgroup_parent(burstable)
    assert b == f"{kubepods}/burstable/pod{burstable.metadata.uid}"
    assert read("cpu", b, "cpu.cfs_quota_us") == "-1"

    assert set(manager.pod_cgroups_on_node()) == {guaranteed.metadata.uid,
                                                  burstable.metadata.uid}
    removed = manager.remove_orphaned_pod_cgroups({guaranteed.metadata.uid})
    assert removed == [burstable.metadata.uid]
    assert not os.path.exists(f"/sys/fs/cgroup/cpu{b}")
    assert os.path.exists(f"/sys/fs/cgroup/cpu{g}")


@needs_v1_root
def test_missing_cgroup_root_is_a_start_up_error(tmp_path: Path) -> None:
    manager = ContainerManager(NodeConfig(cgroup_root="/pykubelet-does-not-exist"),
                               sysctl_dir=str(write_kernel_tunables(tmp_path)))
    with pytest.raises(ContainerManagerError, match="cgroupRoot"):
        manager.start()
