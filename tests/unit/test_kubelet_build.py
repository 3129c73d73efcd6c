"""The composition root as it runs: ``new_main_kubelet`` over fakes at ``Dependencies``.

Every kubelet here is built by the root, as ``createAndInitKubelet`` builds it, on a
fake two-NUMA-node machine (``Dependencies.host_root``), a CRI runtime that only
answers what construction asks, and in cluster mode API clients to an address nothing
listens on (``kubelet_fakes``). What is checked is what a user of the node would
notice: which NUMA node a pod's CPUs come from, why a pod is refused, what the Node
reports, and what a standalone kubelet never does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
)
from pykubelet.credentialprovider.plugin import CredentialProviderConfigError
from pykubelet.kubelet.kubelet import Kubelet, MachineInfoError
from tests.unit.fake_machine import write_fake_machine
from tests.unit.kubelet_fakes import (
    NUMA_NODES,
    RecordingMirrorClient,
    RecordingStore,
    build_kubelet,
    new_kubelet,
    recording_stores,
    with_seams,
)

# Exclusive CPUs, aligned to one NUMA node; CPU 0 is the system's.
PINNING = ["--cpu-manager-policy=static", "--reserved-cpus=0",
           "--topology-manager-policy=single-numa-node"]


def guaranteed_pod(name: str, *, cpus: int, memory: str = "1Gi",
                   sysctls: list[dict[str, str]] | None = None) -> V1Pod:
    resources = {"cpu": str(cpus), "memory": memory}
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [{
        "name": "c", "image": "busybox",
        "resources": {"requests": resources, "limits": resources}}]}
    if sysctls:
        spec["securityContext"] = {"sysctls": sysctls}
    return pod_from_dict({"metadata": {"name": name, "namespace": "default",
                                       "uid": f"uid-{name}"}, "spec": spec})


def start_cpu_manager(kubelet: Kubelet) -> None:
    """The CPU manager's part of ``initialize_modules``: the root directory that holds its
    checkpoint, then its state (the rest wants the host's cgroups)."""
    Path(kubelet.options.root_dir).mkdir(parents=True, exist_ok=True)
    kubelet.cpu_manager.start()


async def rejection(kubelet: Kubelet, pod: V1Pod) -> str | None:
    refused = await kubelet.can_admit_pod([], pod)
    return refused[0] if refused is not None else None


async def test_exclusive_cpus_come_from_one_of_the_machines_two_numa_nodes(
        tmp_path: Path) -> None:
    async with new_kubelet(tmp_path, flags=PINNING) as kubelet:
        assert kubelet.machine.topology.numa_nodes() == sorted(NUMA_NODES) == [0, 1]
        # Every CPU of the machine but the reserved one is the CPU manager's to give.
        assert kubelet.cpu_manager.allocatable_cpus() == [1, 2, 3, 4, 5, 6, 7]
        start_cpu_manager(kubelet)
        # NUMA node 0 has three free CPUs left, node 1 four: four CPUs fit node 1 only.
        four = guaranteed_pod("four", cpus=4)
        assert await rejection(kubelet, four) is None
        assert kubelet.cpu_manager.cpuset_for(four, "c") == "4-7"
        # Five CPUs fit no single node: the topology manager refuses the pod.
        assert await rejection(kubelet, guaranteed_pod("five", cpus=5)) == (
            "TopologyAffinityError")


async def test_admission_asks_eviction_then_sysctls_then_topology_then_the_predicates(
        tmp_path: Path) -> None:
    # Each pod is refused by every handler from the one named on: too big for a NUMA
    # node and for the node's memory, with an unsafe sysctl. The reason is the first's.
    unsafe = [{"name": "kernel.msgmax", "value": "1"}]
    # Disk pressure whatever the disk: the eviction manager refuses every pod.
    disk_pressure = "--eviction-hard=nodefs.available<1000Ti"
    async with new_kubelet(tmp_path / "pressed", flags=[*PINNING, disk_pressure]) as kubelet:
        start_cpu_manager(kubelet)
        await kubelet.resources.eviction.synchronize()
        assert await rejection(kubelet, guaranteed_pod(
            "a", cpus=5, memory="100Gi", sysctls=unsafe)) == "Evicted"
    async with new_kubelet(tmp_path / "calm", flags=PINNING) as kubelet:
        start_cpu_manager(kubelet)
        assert await rejection(kubelet, guaranteed_pod(
            "b", cpus=5, memory="100Gi", sysctls=unsafe)) == "SysctlForbidden"
        assert await rejection(kubelet, guaranteed_pod(
            "c", cpus=5, memory="100Gi")) == "TopologyAffinityError"
        assert await rejection(kubelet, guaranteed_pod(
            "d", cpus=1, memory="100Gi")) == "OutOfmemory"


async def test_a_machine_whose_cpus_cannot_be_read_stops_the_kubelet_saying_so(
        tmp_path: Path) -> None:
    host = write_fake_machine(tmp_path / "host", numa_nodes=NUMA_NODES)
    (host / "sys/devices/system/cpu/online").unlink()
    with pytest.raises(MachineInfoError) as raised:
        async with new_kubelet(tmp_path, host=host):
            pass
    assert "CPU topology" in str(raised.value)
    assert "sys/devices/system/cpu/online" in str(raised.value)


async def test_a_standalone_kubelet_admits_on_the_machine_and_reports_nothing(
        tmp_path: Path) -> None:
    async with new_kubelet(tmp_path) as kubelet:
        assert kubelet.cluster is None
        # What admission weighs pods against: the machine's, less the default hard
        # eviction threshold (memory.available<100Mi).
        node = kubelet.machine.node_view.get_node_any_way()
        assert (node.status.allocatable["cpu"], node.status.allocatable["memory"]) == (
            "8", "8092Mi")
        loops = {name for name, _ in kubelet.tasks()}
        assert not loops & {"node-status", "node-lease", "status-manager"}


async def test_a_cluster_kubelet_registers_its_node_with_the_machines_capacity(
        tmp_path: Path) -> None:
    async with new_kubelet(tmp_path, cluster=True) as kubelet:
        assert kubelet.cluster is not None
        node = await kubelet.cluster.node_status.initial_node()
        assert (node.status.capacity["cpu"], node.status.capacity["memory"]) == ("8", "8Gi")
        loops = {name for name, _ in kubelet.tasks()}
        assert {"node-status", "node-lease", "status-manager"} <= loops


async def test_a_cluster_kubelet_deletes_the_mirror_pod_of_a_static_pod_no_source_wants(
        tmp_path: Path) -> None:
    mirrors = RecordingMirrorClient()
    async with build_kubelet(tmp_path, mirror_client=mirrors) as built:
        orphan = pod_from_dict({"metadata": {
            "name": "etcd-n1", "namespace": "kube-system", "uid": "mirror-uid",
            "annotations": {CONFIG_SOURCE_ANNOTATION_KEY: "api",
                            CONFIG_HASH_ANNOTATION_KEY: "static-uid",
                            CONFIG_MIRROR_ANNOTATION_KEY: "static-uid"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "etcd", "image": "etcd"}]}})
        await built.kubelet.handle_pod_additions([orphan])
        assert built.workers.updates == []  # a mirror pod is never run
        await built.kubelet.delete_orphaned_mirror_pods()
        assert mirrors.deleted == ["etcd-n1_kube-system"]


async def test_stopping_a_cluster_kubelet_ends_its_configmap_and_secret_watches(
        tmp_path: Path) -> None:
    async with new_kubelet(tmp_path, cluster=True) as built:
        assert built.cluster is not None
        cluster = recording_stores(built.cluster)
        kubelet = with_seams(built, cluster=cluster)
        await kubelet.stop()
        stores = [cluster.config_maps.store, cluster.secrets.store]
        assert all(isinstance(s, RecordingStore) and s.stopped for s in stores)


@pytest.mark.parametrize("gate", ["true", "false"])
async def test_the_kubelets_own_gate_decides_whether_credential_providers_may_ask_for_tokens(
        tmp_path: Path, gate: str) -> None:
    """``--feature-gates=KubeletServiceAccountTokenForCredentialProviders=false`` refuses a
    provider's ``tokenAttributes`` as gated; left on (its default), that is not the reason."""
    bin_dir = tmp_path / "plugins"
    bin_dir.mkdir()
    plugin = bin_dir / "login"
    plugin.write_text("#!/bin/sh\nexit 1\n")
    plugin.chmod(0o755)
    config = tmp_path / "credential-providers.json"
    config.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig",
        "providers": [{"name": "login", "matchImages": ["*.example.com"],
                       "defaultCacheDuration": "1m",
                       "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
                       "tokenAttributes": {"serviceAccountTokenAudience": "registry.example.com",
                                           "requireServiceAccount": True,
                                           "cacheType": "ServiceAccount"}}]}))
    flags = [f"--image-credential-provider-config={config}",
             f"--image-credential-provider-bin-dir={bin_dir}",
             f"--feature-gates=KubeletServiceAccountTokenForCredentialProviders={gate}"]
    with pytest.raises(CredentialProviderConfigError) as refused:
        async with new_kubelet(tmp_path, flags=flags):
            pass
    gated = "KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"
    assert (gated in str(refused.value)) == (gate == "false")
