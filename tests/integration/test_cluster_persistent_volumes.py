"""PersistentVolumeClaims on local PVs, against the real control plane.

The controller manager's PV binder binds the claims, the scheduler's volume
binding honours the local PVs' node affinity and a ``WaitForFirstConsumer``
StorageClass, and pykubelet (node credential: the Node authorizer decides
which claims and volumes it may read) mounts them and reports their usage. The PVs are directories
of the test's own; everything cluster-scoped the tests create (StorageClasses,
PVs) carries the test's unique names and is deleted afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cluster_volumes import Cluster
from testsupport.cluster import ClusterKubelet, kubelet_and_namespace, start_cluster_kubelet, unique
from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import mount_points_under
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd, pytest.mark.controlplane]

NO_PROVISIONER = "kubernetes.io/no-provisioner"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, testbed: Testbed,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Volume stats every 2 s instead of every minute.
    with kubelet_and_namespace(control_plane, testbed.endpoint, tmp_path_factory.mktemp("pvc"),
                               prefix="pv", extra_config={"volumeStatsAggPeriod": "2s"}) as (
            kubelet, namespace):
        yield Cluster(control_plane, kubelet, namespace, testbed.busybox_image)


class Storage:
    """A StorageClass of the test's own and the local PVs it creates, removed at the end."""

    def __init__(self, cluster: Cluster, binding_mode: str) -> None:
        self.cluster = cluster
        self.name = unique("local")
        self.pvs: list[str] = []
        cluster.plane.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": self.name}, "provisioner": NO_PROVISIONER,
            "volumeBindingMode": binding_mode}))

    def local_pv(self, path: Path, node: str | None = None) -> str:
        """A local PV of ``path`` on ``node``, by default the pykubelet node (the affinity
        the scheduler reads, and the kubelet checks before it mounts)."""
        name = unique("pv")
        path.mkdir(parents=True, exist_ok=True)
        self.cluster.plane.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": self.name,
                "volumeMode": "Filesystem", "local": {"path": str(path)},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In",
                     "values": [node or self.cluster.kubelet.node_name]}]}]}}}}))
        self.pvs.append(name)
        return name

    def delete(self) -> None:
        plane = self.cluster.plane
        for name in self.pvs:
            plane.kubectl("delete", "pv", name, "--wait=false", "--ignore-not-found",
                          check=False)
        plane.kubectl("delete", "storageclass", self.name, "--ignore-not-found", check=False)


def claim_phase(cluster: Cluster, name: str) -> str:
    result = cluster.plane.kubectl("get", "pvc", "-n", cluster.namespace, name, "-o",
                                   "jsonpath={.status.phase}", check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def volume_metrics(cluster: Cluster, claim: str) -> dict[str, float]:
    """``kubelet_volume_stats_*`` of one claim on ``/metrics``, by name."""
    labels = f'{{namespace="{cluster.namespace}",persistentvolumeclaim="{claim}"}}'
    values = {}
    for line in cluster.kubelet.metrics().splitlines():
        name, _, value = line.partition(labels + " ")
        if value and name.startswith("kubelet_volume_stats_"):
            values[name] = float(value)
    return values


def summary_volume(cluster: Cluster, pod: str) -> dict[str, Any] | None:
    """The pod's ``data`` volume in ``/stats/summary``."""
    url = f"http://127.0.0.1:{cluster.kubelet.read_only_port}/stats/summary"
    with urllib.request.urlopen(url, timeout=10) as response:
        summary = json.loads(response.read())
    for entry in summary["pods"]:
        if entry["podRef"]["name"] == pod:
            return next((v for v in entry.get("volume") or [] if v["name"] == "data"), None)
    return None


def stateful_set(name: str, cluster: Cluster, storage_class: str) -> dict[str, Any]:
    script = ("echo \"started $(hostname)\" >> /data/history; cat /data/history; "
              "echo DONE; sleep 3600")
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "serviceName": name, "replicas": 2, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": cluster.kubelet.node_name},
                    "terminationGracePeriodSeconds": 1,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "app", "image": cluster.image,
                                    "command": ["sh", "-c", script],
                                    "volumeMounts": [{"name": "data",
                                                      "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                         "resources": {"requests": {"storage": "1Gi"}}}}]}}


def test_stateful_set_on_local_pvs_keeps_its_data_across_pod_replacement(
        cluster: Cluster, tmp_path: Path) -> None:
    storage = Storage(cluster, "WaitForFirstConsumer")
    name = unique("db")
    disks = [tmp_path / "disk-a", tmp_path / "disk-b"]
    try:
        for disk in disks:
            storage.local_pv(disk)
        cluster.apply(stateful_set(name, cluster, storage.name))
        pods = [f"{name}-0", f"{name}-1"]
        first = {}
        for pod in pods:
            text = cluster.wait_log(pod, "DONE", timeout=120)
            assert text.splitlines()[0] == f"started {pod}"
            first[pod] = cluster.running(pod)["metadata"]["uid"]
            # The scheduler bound each claim to one of the node's local PVs.
            assert claim_phase(cluster, f"data-{pod}") == "Bound"
        # Each pod wrote into its own PV's directory on the node.
        written = sorted((disk / "history").read_text() for disk in disks)
        assert written == sorted(f"started {pod}\n" for pod in pods)
        # Volume stats: the local PV's file system, under the claim's name.
        claim = f"data-{pods[0]}"
        metrics = wait_until(lambda: (m := volume_metrics(cluster, claim)) and m, 30,
                             "kubelet_volume_stats_* of the claim", on_timeout=cluster.log_tail)
        fs = os.statvfs(disks[0])
        assert metrics["kubelet_volume_stats_capacity_bytes"] == fs.f_blocks * fs.f_frsize
        assert metrics["kubelet_volume_stats_inodes"] == fs.f_files
        assert 0 < metrics["kubelet_volume_stats_used_bytes"] < \
            metrics["kubelet_volume_stats_capacity_bytes"]
        assert set(metrics) == {f"kubelet_volume_stats_{n}" for n in (
            "capacity_bytes", "available_bytes", "used_bytes", "inodes", "inodes_free",
            "inodes_used")}
        volume = wait_until(lambda: summary_volume(cluster, pods[0]), 30,
                            "the claim in /stats/summary")
        assert volume["pvcRef"] == {"name": claim, "namespace": cluster.namespace}
        assert volume["capacityBytes"] == fs.f_blocks * fs.f_frsize
        uid = first[pods[0]]
        mount_point = next((cluster.kubelet.root / "pods" / uid / "volumes" /
                            "kubernetes.io~local-volume").iterdir())
        assert mount_point.name in storage.pvs

        cluster.plane.kubectl("delete", "pod", "-n", cluster.namespace, *pods,
                              "--wait=true", "--timeout=60s")
        for pod in pods:
            # The StatefulSet's new pod of the same name, on the same claim.
            wait_until(lambda pod=pod: (p := cluster.pod(pod)) is not None
                       and p["metadata"]["uid"] != first[pod], 60, f"a new {pod}")
            text = cluster.wait_log(pod, "DONE", timeout=120)
            assert text.splitlines()[:2] == [f"started {pod}", f"started {pod}"]
        # The old pods' mounts went, their directories too; the PVs' data stayed.
        wait_until(lambda: not (cluster.kubelet.root / "pods" / uid).exists(), 60,
                   "the deleted pod's directory removed", on_timeout=cluster.log_tail)
        with open("/proc/self/mountinfo", encoding="utf-8") as info:
            assert uid not in info.read()
        assert sorted(len((disk / "history").read_text().splitlines()) for disk in disks) == \
            [2, 2]
        assert cluster.kubelet.forbidden_lines() == []
    finally:
        cluster.plane.kubectl("delete", "statefulset", "-n", cluster.namespace, name,
                              "--ignore-not-found", check=False)
        cluster.plane.kubectl("delete", "pod", "-n", cluster.namespace, "-l", f"app={name}",
                              "--wait=true", "--timeout=60s", check=False)
        storage.delete()


def test_a_pod_with_an_unbound_claim_waits_until_a_pv_binds_it(
        cluster: Cluster, tmp_path: Path) -> None:
    storage = Storage(cluster, "Immediate")
    claim, name = unique("claim"), unique("waiter")
    try:
        cluster.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": claim},
                       "spec": {"accessModes": ["ReadWriteOnce"],
                                "storageClassName": storage.name,
                                "resources": {"requests": {"storage": "1Gi"}}}})
        cluster.create_pod(
            name, "cat /data/seed",
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]})
        expected = (f"Unable to attach or mount volumes: unmounted volumes=[data], "
                    f"unattached volumes=[], failed to process volumes=[data]: error "
                    f"processing PVC {cluster.namespace}/{claim}: PVC is not bound")
        event = wait_until(
            lambda: next((e for e in cluster.events(name) if e["reason"] == "FailedMount"
                          and e["message"] == expected), None),
            60, "FailedMount event naming the unbound claim", on_timeout=cluster.log_tail)
        assert event["type"] == "Warning"
        pod = cluster.pod(name)
        assert pod is not None and pod["status"]["phase"] == "Pending"
        assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == \
            "ContainerCreating"
        disk = tmp_path / "late-disk"
        disk.mkdir()
        (disk / "seed").write_text("from the pv\n")
        storage.local_pv(disk)
        # The binder's periodic sync (15 s) binds it; the kubelet's retries then mount it.
        assert "from the pv" in cluster.wait_log(name, "DONE", timeout=120)
        assert claim_phase(cluster, claim) == "Bound"
        cluster.plane.kubectl("delete", "pod", "-n", cluster.namespace, name, "--wait=true",
                              "--timeout=60s")
        assert (disk / "seed").read_text() == "from the pv\n"
    finally:
        cluster.delete(name)
        cluster.plane.kubectl("delete", "pvc", "-n", cluster.namespace, claim,
                              "--wait=false", "--ignore-not-found", check=False)
        storage.delete()


def test_a_pv_of_a_pod_deleted_while_the_kubelet_was_down_is_unmounted_and_kept(
        cluster: Cluster, testbed: Testbed, tmp_path: Path) -> None:
    plane = cluster.plane
    first = start_cluster_kubelet(plane, testbed.endpoint, tmp_path / "node")
    other = Cluster(plane, first, cluster.namespace, cluster.image)
    storage = Storage(other, "Immediate")
    claim, name = unique("claim"), unique("restart")
    second: ClusterKubelet | None = None
    try:
        disk = tmp_path / "disk"
        storage.local_pv(disk)
        other.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": claim},
                     "spec": {"accessModes": ["ReadWriteOnce"],
                              "storageClassName": storage.name,
                              "resources": {"requests": {"storage": "1Gi"}}}})
        wait_until(lambda: claim_phase(other, claim) == "Bound", 60, "the claim bound")
        other.create_pod(
            name, "echo kept > /data/file",
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]})
        other.wait_log(name, "DONE")
        uid = other.running(name)["metadata"]["uid"]
        pod_dir = first.root / "pods" / uid
        assert mount_points_under([pod_dir], including_roots=False)
        first.stop(signal.SIGKILL)
        # Gone from the API while no kubelet runs (a force deletion skips the kubelet).
        plane.kubectl("delete", "pod", "-n", cluster.namespace, name, "--grace-period=0",
                      "--force")
        second = ClusterKubelet(first.base, testbed.endpoint, plane, first.node_name,
                                kubeconfig=first.kubeconfig,
                                extra_config={"cgroupRoot": first.cgroup_root})
        second.start()
        second.wait_for(
            lambda: not pod_dir.exists()
            and not mount_points_under([pod_dir], including_roots=True), 90,
            "the gone pod's PV unmounted and its directory removed")
        assert (disk / "file").read_text() == "kept\n"
    finally:
        for kubelet in (second, first):
            if kubelet is not None:
                kubelet.stop()
        plane.kubectl("delete", "pod", "-n", cluster.namespace, name, "--grace-period=0",
                      "--force", "--ignore-not-found", check=False)
        plane.kubectl("delete", "pvc", "-n", cluster.namespace, claim, "--wait=false",
                      "--ignore-not-found", check=False)
        first.delete_node()
        storage.delete()


def test_a_pod_bound_by_hand_beside_its_local_pvs_node_waits_with_failed_mount(
        cluster: Cluster, tmp_path: Path) -> None:
    """``spec.nodeName`` bypasses the scheduler, so only the kubelet's own check of the PV's
    node affinity stands between the pod and a directory that is another node's disk."""
    storage = Storage(cluster, "Immediate")
    claim, name = unique("claim"), unique("elsewhere")
    try:
        disk = tmp_path / "other-nodes-disk"
        pv = storage.local_pv(disk, node=unique("other-node"))
        # Immediate binding: the PV binder does not look at node affinity.
        cluster.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": claim},
                       "spec": {"accessModes": ["ReadWriteOnce"],
                                "storageClassName": storage.name,
                                "resources": {"requests": {"storage": "1Gi"}}}})
        wait_until(lambda: claim_phase(cluster, claim) == "Bound", 60, "the claim bound")
        cluster.create_pod(
            name, "touch /data/written",
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]})
        expected = (f'MountVolume.NodeAffinity check failed for volume "{pv}" : '
                    f"no matching NodeSelectorTerms")

        def refusals() -> int:
            return sum(int(e.get("count") or 1) for e in cluster.events(name)
                       if e["reason"] == "FailedMount" and e["message"] == expected)

        # Refused, and refused again on the pod worker's retry: the pod waits.
        wait_until(lambda: refusals() >= 2, 90, "two FailedMount events of the node check",
                   on_timeout=cluster.log_tail)
        pod = cluster.pod(name)
        assert pod is not None and pod["status"]["phase"] == "Pending"
        assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == \
            "ContainerCreating"
        uid = pod["metadata"]["uid"]
        assert not (cluster.kubelet.root / "pods" / uid / "volumes" /
                    "kubernetes.io~local-volume").exists()
        assert list(disk.iterdir()) == []
        assert cluster.kubelet.forbidden_lines() == []
    finally:
        cluster.delete(name)
        cluster.plane.kubectl("delete", "pvc", "-n", cluster.namespace, claim,
                              "--wait=false", "--ignore-not-found", check=False)
        storage.delete()
