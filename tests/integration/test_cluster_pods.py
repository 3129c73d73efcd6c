"""pykubelet in cluster mode, pod side, against the real control plane and containerd.

Everything here is what a cluster user sees through ``kubectl``: pods bound
to pykubelet's node run and report their status in the API, deleting a pod
stops it within its grace period, static pods show up as mirror pods,
rejected pods are Failed with the upstream reason, pods with a volume
type pykubelet cannot mount (NFS) wait, events are posted, and an API server
restart, an etcd compaction or a 30 s outage does not lose a pod.

One pykubelet (node credential, one static pod directory) serves the whole
module; each test uses pods of its own and deletes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testsupport.cluster import (
    ClusterKubelet,
    api_pod,
    compact_etcd,
    create,
    get_pod,
    pod_events,
    restart_apiserver,
    start_cluster_kubelet,
    unique,
)
from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import (
    busybox_pod,
    remove_everything,
    runtime_view,
)
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd, pytest.mark.controlplane]


def running_containers(endpoint: str, uid: str) -> list[Any]:
    """The runtime's running containers of the pod ``uid`` (what crictl ps would list)."""
    view = runtime_view(endpoint)
    return [c for c in view["containers"]
            if c.labels.get("io.kubernetes.pod.uid") == uid and c.state == 1]


@dataclass
class Cluster:
    """pykubelet on its Node, and the namespace this module's pods live in."""

    plane: ControlPlane
    kubelet: ClusterKubelet
    namespace: str
    image: str
    endpoint: str

    def create(self, name: str, script: str = "sleep 3600", **options: Any) -> None:
        manifest = api_pod(name, self.node_name, self.image, script, **options)
        manifest["metadata"]["namespace"] = self.namespace
        create(self.plane, manifest)

    @property
    def node_name(self) -> str:
        return self.kubelet.node_name

    def pod(self, name: str) -> dict[str, Any] | None:
        return get_pod(self.plane, name, self.namespace)

    def phase(self, name: str) -> str | None:
        return ((self.pod(name) or {}).get("status") or {}).get("phase")

    def events(self, name: str) -> list[dict[str, Any]]:
        return pod_events(self.plane, name, self.namespace)

    def delete(self, *names: str, wait: bool = False) -> None:
        self.plane.kubectl("delete", "pod", "-n", self.namespace, *names,
                           f"--wait={str(wait).lower()}", "--ignore-not-found", check=False)

    def wait_phase(self, name: str, wanted: str, timeout: float = 60) -> None:
        wait_until(lambda: self.phase(name) == wanted, timeout, f"pod {name} {wanted}",
                   on_timeout=self.log_tail)

    def log_tail(self) -> str:
        return f"kubelet log tail:\n{self.kubelet.log_text()[-4000:]}"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, testbed: Testbed,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    namespace = unique("pods")
    control_plane.kubectl("create", "namespace", namespace)
    kubelet = start_cluster_kubelet(control_plane, testbed.endpoint,
                                    tmp_path_factory.mktemp("cluster"),
                                    {"fileCheckFrequency": "5s", "maxPods": 20})
    try:
        # The ServiceAccount admission plugin refuses pods until the namespace's default
        # account exists (the controller manager makes it, in a second or so).
        wait_until(lambda: control_plane.kubectl("get", "serviceaccount", "default", "-n",
                                                 namespace, check=False).returncode == 0,
                   60, "the namespace's default service account")
        yield Cluster(control_plane, kubelet, namespace, testbed.busybox_image,
                      testbed.endpoint)
    finally:
        kubelet.stop()
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubelet.delete_node()
        remove_everything(testbed.endpoint)


def test_a_pod_created_through_the_api_runs_and_reports_its_phases(cluster: Cluster) -> None:
    name = unique("job")
    cluster.create(name, "sleep 4; echo done", restart_policy="Never")
    seen: list[str] = []
    running_ip: list[str] = []

    def finished() -> bool:
        status = (cluster.pod(name) or {}).get("status") or {}
        current = status.get("phase")
        if current and (not seen or seen[-1] != current):
            seen.append(current)
        if current == "Running" and status.get("podIP"):
            running_ip.append(status["podIP"])
        return current == "Succeeded"

    wait_until(finished, 90, f"pod {name} Succeeded", interval=0.2,
               on_timeout=cluster.log_tail)
    assert seen[0] == "Pending"
    assert "Running" in seen
    assert seen.index("Running") < seen.index("Succeeded")
    pod = cluster.pod(name)
    assert pod is not None
    (container,) = pod["status"]["containerStatuses"]
    terminated = container["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == (
        "False", "PodCompleted")
    assert conditions["PodScheduled"]["status"] == "True"
    node = cluster.kubelet.node() or {}
    internal_ips = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert pod["status"]["hostIP"] == internal_ips[0]
    assert running_ip, "no podIP reported while Running"
    # The events a user expects from a kubelet, through kubectl get events.
    wait_until(lambda: {e["reason"] for e in cluster.events(name)}
               >= {"Pulled", "Created", "Started"}, 30, "Pulled/Created/Started events")
    started = next(e for e in cluster.events(name) if e["reason"] == "Started")
    assert started["source"] == {"component": "kubelet", "host": cluster.node_name}
    assert started["involvedObject"]["fieldPath"] == "spec.containers{app}"
    assert started["message"] == "Started container app"
    cluster.delete(name)


def test_a_pod_deleted_through_the_api_is_stopped_and_removed_within_its_grace_period(
        cluster: Cluster) -> None:
    name = unique("stubborn")
    # Ignores SIGTERM: only the end of the grace period stops it.
    cluster.create(name, "trap '' TERM; while true; do sleep 1; done", grace=5)
    cluster.wait_phase(name, "Running")
    pod = cluster.pod(name)
    assert pod is not None
    uid = pod["metadata"]["uid"]
    assert running_containers(cluster.endpoint, uid)

    started = time.monotonic()
    cluster.delete(name)
    wait_until(lambda: cluster.pod(name) is None, 30, f"{name} gone from the API",
               on_timeout=cluster.log_tail)
    took = time.monotonic() - started
    # Killed no sooner than the grace period allows, and deleted soon after.
    assert 4.0 <= took <= 15.0, took
    assert not running_containers(cluster.endpoint, uid)
    killing = [e for e in cluster.events(name) if e["reason"] == "Killing"]
    assert killing and "Stopping container app" in killing[0]["message"]


def test_a_running_pod_whose_active_deadline_is_shortened_is_failed_deadline_exceeded(
        cluster: Cluster) -> None:
    """Upstream's conformance test "Pods should allow activeDeadlineSeconds to be updated"."""
    name = unique("deadline")
    cluster.create(name, grace=2)
    cluster.wait_phase(name, "Running")
    pod = cluster.pod(name)
    assert pod is not None
    uid = pod["metadata"]["uid"]
    cluster.plane.kubectl("patch", "pod", "-n", cluster.namespace, name, "-p",
                          json.dumps({"spec": {"activeDeadlineSeconds": 5}}))

    status = wait_until(
        lambda: (s := ((cluster.pod(name) or {}).get("status") or {})).get("phase") == "Failed"
        and s, 60, f"pod {name} Failed", on_timeout=cluster.log_tail)
    assert status["reason"] == "DeadlineExceeded"
    assert status["message"] == "Pod was active on the node longer than the specified deadline"
    wait_until(lambda: not running_containers(cluster.endpoint, uid), 30,
               f"{name}'s containers stopped", on_timeout=cluster.log_tail)
    wait_until(lambda: [e for e in cluster.events(name)
                        if (e["reason"], e["type"]) == ("DeadlineExceeded", "Normal")],
               30, "a Normal DeadlineExceeded event")
    final = cluster.pod(name)
    assert final is not None
    assert (final["status"]["phase"], final["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    cluster.delete(name)


def test_a_static_pod_is_mirrored_in_the_api(cluster: Cluster) -> None:
    base = unique("static")
    path = cluster.kubelet.write_pod(busybox_pod(base, [{"name": "app", "command": [
        "sh", "-c", "sleep 3600"]}], cluster.image))
    name = f"{base}-{cluster.node_name}"

    def mirror_running() -> dict[str, Any] | None:
        pod = get_pod(cluster.plane, name)
        return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None

    mirror = wait_until(mirror_running, 60, "mirror pod Running in the API",
                        on_timeout=cluster.log_tail)
    annotations = mirror["metadata"]["annotations"]
    assert annotations["kubernetes.io/config.mirror"] == annotations["kubernetes.io/config.hash"]
    assert annotations["kubernetes.io/config.source"] == "file"
    (owner,) = mirror["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Node", cluster.node_name,
                                                                   True)
    container_id = mirror["status"]["containerStatuses"][0]["containerID"]

    # kubectl delete removes the mirror pod, not the static pod: it comes back.
    cluster.plane.kubectl("delete", "pod", name, "--wait=false")
    recreated = wait_until(
        lambda: (p := mirror_running()) and p["metadata"]["uid"] != mirror["metadata"]["uid"]
        and p, 60, "mirror pod recreated", on_timeout=cluster.log_tail)
    assert recreated["status"]["containerStatuses"][0]["containerID"] == container_id

    path.unlink()
    wait_until(lambda: get_pod(cluster.plane, name) is None, 60, "mirror pod deleted",
               on_timeout=cluster.log_tail)


def test_rejected_pods_are_failed_with_the_upstream_reason(cluster: Cluster) -> None:
    picky = unique("picky")
    cluster.create(picky, nodeSelector={"disktype": "ssd"})

    def failed(name: str) -> dict[str, Any] | None:
        status = (cluster.pod(name) or {}).get("status") or {}
        return status if status.get("phase") == "Failed" else None

    status = wait_until(lambda: failed(picky), 60, "node selector rejection",
                        on_timeout=cluster.log_tail)
    assert status["reason"] == "NodeAffinity"
    assert status["message"] == ("Pod was rejected: Predicate NodeAffinity failed: node(s) "
                                 "didn't match Pod's node affinity/selector")

    cluster.delete(picky)


def test_a_pod_beyond_max_pods_is_failed_out_of_pods(
        cluster: Cluster, testbed: Testbed, tmp_path: Path) -> None:
    # A node of its own that holds one pod (maxPods: 1, so allocatable pods 1).
    small = start_cluster_kubelet(cluster.plane, testbed.endpoint, tmp_path, {"maxPods": 1})
    fits, too_many = unique("fits"), unique("toomany")
    try:
        allocatable = (small.node() or {}).get("status", {}).get("allocatable", {})
        assert allocatable.get("pods") == "1"
        for name in (fits, too_many):
            manifest = api_pod(name, small.node_name, cluster.image)
            manifest["metadata"]["namespace"] = cluster.namespace
            create(cluster.plane, manifest)
            if name == fits:
                cluster.wait_phase(fits, "Running")

        def failed() -> dict[str, Any] | None:
            status = (cluster.pod(too_many) or {}).get("status") or {}
            return status if status.get("phase") == "Failed" else None

        status = wait_until(failed, 60, "OutOfpods rejection",
                            on_timeout=lambda: small.log_text()[-4000:])
        assert status["reason"] == "OutOfpods"
        assert status["message"] == ("Pod was rejected: Node didn't have enough resource: pods, "
                                     "requested: 1, used: 1, capacity: 1")
        assert "OutOfpods" in {e["reason"] for e in cluster.events(too_many)}
        assert cluster.phase(fits) == "Running"
    finally:
        cluster.delete(fits, too_many, wait=True)
        small.stop()
        small.delete_node()


def test_a_pod_with_a_volume_pykubelet_cannot_mount_waits_in_container_creating(
        cluster: Cluster) -> None:
    name = unique("nfs")
    # No NFS client in pykubelet: the pod must wait, never start without its data.
    cluster.create(name, volumes=[{"name": "data", "nfs": {"server": "127.0.0.1",
                                                           "path": "/exports"}}])
    event = wait_until(
        lambda: next((e for e in cluster.events(name) if e["reason"] == "FailedMount"), None),
        60, "FailedMount event", on_timeout=cluster.log_tail)
    assert event["type"] == "Warning"
    assert 'volume "data" has type nfs' in event["message"]
    pod = cluster.pod(name)
    assert pod is not None
    assert pod["status"]["phase"] == "Pending"
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ContainerCreating"
    assert not running_containers(cluster.endpoint, pod["metadata"]["uid"])
    assert cluster.kubelet.healthz() == "ok"
    cluster.delete(name)
    wait_until(lambda: cluster.pod(name) is None, 30, f"{name} deleted")


def test_the_watch_relists_after_an_apiserver_restart_and_etcd_compaction(
        cluster: Cluster) -> None:
    keeper, doomed = unique("keeper"), unique("doomed")
    for name in (keeper, doomed):
        cluster.create(name)
    for name in (keeper, doomed):
        cluster.wait_phase(name, "Running")
    keeper_pod = cluster.pod(keeper)
    assert keeper_pod is not None
    keeper_id = keeper_pod["status"]["containerStatuses"][0]["containerID"]
    # Other writes move etcd's revision past the kubelet's pod watch.
    for index in range(3):
        cluster.plane.kubectl("create", "configmap", "-n", cluster.namespace,
                              unique(f"bump{index}"))
    relists_before = cluster.kubelet.log_text().count("resource version too old")

    restart_apiserver(cluster.plane, while_down=lambda: compact_etcd(cluster.plane))
    # Deleted while the kubelet may still be reconnecting: the relist must catch it.
    cluster.delete(doomed)
    fresh = unique("after")
    cluster.create(fresh)
    cluster.wait_phase(fresh, "Running", timeout=120)
    wait_until(lambda: cluster.pod(doomed) is None, 60, f"{doomed} deleted",
               on_timeout=cluster.log_tail)
    assert cluster.kubelet.log_text().count("resource version too old") > relists_before
    pod = cluster.pod(keeper)
    assert pod is not None
    container = pod["status"]["containerStatuses"][0]
    assert (container["containerID"], container["restartCount"]) == (keeper_id, 0)
    cluster.delete(keeper, fresh)


def test_a_30s_outage_keeps_pods_running_and_status_catches_up(cluster: Cluster) -> None:
    steady, short = unique("steady"), unique("short")
    cluster.create(steady)
    cluster.create(short, "sleep 12", restart_policy="Never")
    for name in (steady, short):
        cluster.wait_phase(name, "Running")
    steady_pod = cluster.pod(steady)
    assert steady_pod is not None
    steady_id = steady_pod["status"]["containerStatuses"][0]["containerID"]

    # The short pod finishes while the API server is away.
    restart_apiserver(cluster.plane, down_for=30)
    assert cluster.kubelet.healthz() == "ok"
    cluster.wait_phase(short, "Succeeded", timeout=90)
    pod = cluster.pod(steady)
    assert pod is not None
    container = pod["status"]["containerStatuses"][0]
    assert (container["containerID"], container["restartCount"]) == (steady_id, 0)
    assert running_containers(cluster.endpoint, pod["metadata"]["uid"])
    cluster.delete(steady, short)


def test_kubectl_drives_a_pod_end_to_end(cluster: Cluster) -> None:
    """kubectl run, wait, get and delete, as a user types them."""
    name = unique("kubectl")
    # No automountServiceAccountToken: false: the API server's kube-api-access-*
    # volume (token, ca.crt, namespace) is mounted like any other.
    overrides = json.dumps({"spec": {"nodeName": cluster.node_name}})
    ns = ["-n", cluster.namespace]
    wait_until(lambda: cluster.plane.kubectl("get", "serviceaccount", "default", *ns,
                                             check=False).returncode == 0,
               60, "the namespace's default service account")
    cluster.plane.kubectl("run", name, *ns, f"--image={cluster.image}", "--restart=Never",
                          f"--overrides={overrides}", "--", "sh", "-c", "sleep 3600")
    cluster.plane.kubectl("wait", *ns, "--for=condition=Ready", f"pod/{name}",
                          "--timeout=90s", timeout=100)
    listing = cluster.plane.kubectl("get", "pods", *ns, "-o", "wide").stdout
    line = next(row for row in listing.splitlines() if row.startswith(name))
    assert "Running" in line and cluster.node_name in line and "1/1" in line
    cluster.plane.kubectl("delete", "pod", *ns, name, "--grace-period=2", timeout=60)
    assert cluster.pod(name) is None
