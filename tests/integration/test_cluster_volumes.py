"""ConfigMaps, Secrets and service-account tokens in pods, against the real control plane.

One self-registering pykubelet (node credential, Node authorizer) serves the
module; each test creates its objects and pods through kubectl in a namespace
of its own and reads what the container printed into its log, as ``kubectl
logs`` would show it. The API server's own ``kube-api-access-*`` volume (the
ServiceAccount admission plugin adds it to every pod) is left in place: a
plain pod must run.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testsupport.cluster import (
    ClusterKubelet,
    api_pod,
    create,
    get_pod,
    kubelet_and_namespace,
    pod_events,
    start_cluster_kubelet,
    unique,
)
from testsupport.controlplane import ControlPlane
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd, pytest.mark.controlplane]

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class Cluster:
    plane: ControlPlane
    kubelet: ClusterKubelet
    namespace: str
    image: str

    def apply(self, manifest: dict[str, Any]) -> None:
        manifest.setdefault("metadata", {})["namespace"] = self.namespace
        self.plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def config_map(self, name: str, data: dict[str, str]) -> None:
        self.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                    "data": data})

    def secret(self, name: str, data: dict[str, str]) -> None:
        self.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                    "data": {k: base64.b64encode(v.encode()).decode()
                             for k, v in data.items()}})

    def create_pod(self, name: str, script: str, *, automount: bool = False,
                   container: dict[str, Any] | None = None, **spec: Any) -> None:
        """One container ``app`` running ``script``, then ``echo DONE`` and a sleep."""
        manifest = api_pod(name, self.kubelet.node_name, self.image,
                           script + "\necho DONE\nsleep 3600", automount=automount,
                           grace=1, **spec)
        manifest["spec"]["containers"][0].update(container or {})
        manifest["metadata"]["namespace"] = self.namespace
        create(self.plane, manifest)

    def pod(self, name: str) -> dict[str, Any] | None:
        return get_pod(self.plane, name, self.namespace)

    def events(self, name: str) -> list[dict[str, Any]]:
        return pod_events(self.plane, name, self.namespace)

    def log(self, name: str, container: str = "app") -> str:
        """What the container printed (its CRI log file's content, as kubectl logs shows)."""
        pod = self.pod(name)
        if pod is None:
            return ""
        uid = pod["metadata"]["uid"]
        path = (self.kubelet.logs_dir / f"{self.namespace}_{name}_{uid}" / container / "0.log")
        if not path.exists():
            return ""
        return "\n".join(parts[3] for line in path.read_text(errors="replace").splitlines()
                         if len(parts := line.split(" ", 3)) == 4)

    def wait_log(self, name: str, marker: str, timeout: float = 90) -> str:
        return str(wait_until(lambda: marker in (text := self.log(name)) and text, timeout,
                              f"{marker!r} in the log of {name}", on_timeout=self.log_tail))

    def running(self, name: str) -> dict[str, Any]:
        """The pod once the API shows it Running with its container's ID."""
        def check() -> dict[str, Any] | None:
            pod = self.pod(name)
            status = (pod or {}).get("status") or {}
            ready = status.get("phase") == "Running" and all(
                c.get("containerID") for c in status.get("containerStatuses") or [{}])
            return pod if ready else None
        return dict(wait_until(check, 60, f"{name} Running in the API",
                               on_timeout=self.log_tail))

    def log_tail(self) -> str:
        return f"kubelet log tail:\n{self.kubelet.log_text()[-4000:]}"

    def delete(self, *names: str) -> None:
        self.plane.kubectl("delete", "pod", "-n", self.namespace, *names, "--wait=false",
                           "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, testbed: Testbed,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kubelet_and_namespace(control_plane, testbed.endpoint,
                               tmp_path_factory.mktemp("volumes"), prefix="vol") as (
            kubelet, namespace):
        yield Cluster(control_plane, kubelet, namespace, testbed.busybox_image)


def test_config_map_and_secret_volumes_and_env_and_a_live_update(cluster: Cluster) -> None:
    cfg, sec, name = unique("cfg"), unique("sec"), unique("consumer")
    cluster.config_map(cfg, {"greeting": "hello", "color": "blue"})
    cluster.secret(sec, {"password": "s3cret"})
    cluster.create_pod(
        name,
        "echo GREETING=$GREETING; echo PASSWORD=$PASSWORD; echo CFG_color=$CFG_color; "
        "ls -a /cfg; grep ' /sec ' /proc/mounts; cat /sec/password; echo; "
        "(while true; do echo \"now=$(cat /cfg/greeting)\"; sleep 1; done) &",
        volumes=[{"name": "cfg", "configMap": {"name": cfg}},
                 {"name": "sec", "secret": {"secretName": sec, "defaultMode": 0o400}}],
        container={
            "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef":
                                                        {"name": cfg, "key": "greeting"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef":
                                                        {"name": sec, "key": "password"}}}],
            "envFrom": [{"configMapRef": {"name": cfg}, "prefix": "CFG_"}],
            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"},
                             {"name": "sec", "mountPath": "/sec"}]})
    text = cluster.wait_log(name, "DONE")
    assert "GREETING=hello" in text
    assert "PASSWORD=s3cret" in text
    assert "CFG_color=blue" in text
    listing = text.split()
    assert "..data" in listing and "greeting" in listing and "color" in listing
    sec_line = next(line for line in text.splitlines() if " /sec " in line)
    assert sec_line.startswith("tmpfs /sec tmpfs ")  # a secret never touches the disk
    assert "s3cret" in text.splitlines()
    pod = cluster.running(name)
    container_id = pod["status"]["containerStatuses"][0]["containerID"]

    cluster.config_map(cfg, {"greeting": "bonjour", "color": "blue"})
    cluster.wait_log(name, "now=bonjour", timeout=90)
    pod = cluster.pod(name)
    assert pod is not None
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0 and status["containerID"] == container_id
    cluster.delete(name)


def test_a_missing_config_map_blocks_the_pod_until_it_is_created(cluster: Cluster) -> None:
    cfg, name = unique("late"), unique("waiter")
    cluster.create_pod(
        name, "cat /cfg/key; echo",
        volumes=[{"name": "cfg", "configMap": {"name": cfg}},
                 {"name": "opt", "configMap": {"name": unique("absent"), "optional": True}}],
        container={"volumeMounts": [{"name": "cfg", "mountPath": "/cfg"},
                                    {"name": "opt", "mountPath": "/opt-cfg"}]})
    expected = f'MountVolume.SetUp failed for volume "cfg" : configmap "{cfg}" not found'
    event = wait_until(
        lambda: next((e for e in cluster.events(name) if e["reason"] == "FailedMount"
                      and expected in e["message"]), None),
        60, "FailedMount event naming the ConfigMap", on_timeout=cluster.log_tail)
    assert event["type"] == "Warning"
    pod = cluster.pod(name)
    assert pod is not None and pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == \
        "ContainerCreating"
    cluster.config_map(cfg, {"key": "arrived"})
    assert "arrived" in cluster.wait_log(name, "DONE", timeout=120)
    # The optional, missing ConfigMap never produced an event.
    assert not any('volume "opt"' in e["message"] and "not found" in e["message"]
                   for e in cluster.events(name))
    cluster.delete(name)


def test_the_injected_kube_api_access_volume_and_a_projected_token(cluster: Cluster) -> None:
    name = unique("sa")
    cluster.create_pod(
        name,
        f"echo NS=$(cat {SA_DIR}/namespace); head -1 {SA_DIR}/ca.crt; "
        f"echo TOKEN=$(cat {SA_DIR}/token); "
        "echo VAULT=$(cat /vault/token); echo POD=$(cat /vault/pod)",
        automount=True,
        volumes=[{"name": "vault-token", "projected": {"sources": [
            {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 600,
                                     "path": "token"}},
            {"downwardAPI": {"items": [{"path": "pod", "fieldRef":
                                        {"fieldPath": "metadata.name"}}]}}]}}],
        container={"volumeMounts": [{"name": "vault-token", "mountPath": "/vault"}]})
    text = cluster.wait_log(name, "DONE", timeout=120)
    pod = cluster.pod(name)
    assert pod is not None
    assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])
    assert f"NS={cluster.namespace}" in text
    assert "-----BEGIN CERTIFICATE-----" in text
    assert f"POD={name}" in text
    values = dict(line.split("=", 1) for line in text.splitlines()
                  if line.startswith(("TOKEN=", "VAULT=")))

    def review(token: str, audiences: list[str]) -> dict[str, Any]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": audiences}}
        result = cluster.plane.kubectl("create", "-o", "json", "-f", "-",
                                       input=json.dumps(body))
        status: dict[str, Any] = json.loads(result.stdout)["status"]
        return status

    account = f"system:serviceaccount:{cluster.namespace}:default"
    default = review(values["TOKEN"], [])
    assert default.get("authenticated") is True
    assert default["user"]["username"] == account
    # Bound to the pod: the API server reports which pod the token belongs to.
    assert default["user"]["extra"]["authentication.kubernetes.io/pod-name"] == [name]
    vault = review(values["VAULT"], ["vault"])
    assert vault.get("authenticated") is True and vault["audiences"] == ["vault"]
    assert vault["user"]["username"] == account
    # The vault token is not accepted for the API server's own audience.
    assert review(values["VAULT"], []).get("authenticated") is not True
    cluster.delete(name)


def test_volumes_are_cleaned_up_after_the_pod_is_deleted(cluster: Cluster) -> None:
    cfg, name = unique("gone"), unique("gone")
    cluster.secret(cfg, {"k": "v"})
    cluster.create_pod(name, "cat /s/k",
                       volumes=[{"name": "s", "secret": {"secretName": cfg}}],
                       container={"volumeMounts": [{"name": "s", "mountPath": "/s"}]})
    cluster.wait_log(name, "DONE")
    pod = cluster.pod(name)
    assert pod is not None
    pod_dir = cluster.kubelet.root / "pods" / pod["metadata"]["uid"]
    assert (pod_dir / "volumes" / "kubernetes.io~secret" / "s" / "k").exists()
    cluster.plane.kubectl("delete", "pod", "-n", cluster.namespace, name, "--wait=true",
                          "--timeout=60s")

    def cleaned() -> bool:
        with open("/proc/self/mountinfo", encoding="utf-8") as info:
            mounted = any(str(pod_dir) in line for line in info)
        return not mounted and not Path(pod_dir).exists()

    wait_until(cleaned, 60, "secret tmpfs unmounted and pod directory removed",
               on_timeout=cluster.log_tail)


def test_env_from_every_source_shows_in_the_container(cluster: Cluster) -> None:
    cfg, name, svc = unique("envcfg"), unique("env"), unique("web")
    cluster.config_map(cfg, {"mode": "fast"})
    cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": svc},
                   "spec": {"ports": [{"name": "http", "port": 8080}],
                            "selector": {"app": svc}}})
    cluster.create_pod(
        name, "env | sort",
        container={
            "resources": {"limits": {"memory": "32Mi"}},
            "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef":
                                                    {"name": cfg, "key": "mode"}}},
                    {"name": "GREETING", "value": "mode is $(MODE)"},
                    {"name": "MISSING", "valueFrom": {"configMapKeyRef": {
                        "name": cfg, "key": "absent", "optional": True}}},
                    {"name": "MY_NODE", "valueFrom": {"fieldRef":
                                                       {"fieldPath": "spec.nodeName"}}},
                    {"name": "MY_IP", "valueFrom": {"fieldRef":
                                                     {"fieldPath": "status.podIP"}}},
                    {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {
                        "resource": "limits.memory", "divisor": "1Mi"}}}]})
    text = cluster.wait_log(name, "DONE")
    lines = set(text.splitlines())
    assert "MODE=fast" in lines and "GREETING=mode is fast" in lines
    assert not any(line.startswith("MISSING=") for line in lines)
    assert f"MY_NODE={cluster.kubelet.node_name}" in lines
    assert "MEM_MI=32" in lines
    pod = cluster.running(name)
    assert f"MY_IP={pod['status']['podIP']}" in lines
    # Service links: the namespace's Service and the cluster's kubernetes Service.
    service = cluster.plane.kubectl_json("get", "service", "-n", cluster.namespace, svc)
    prefix = svc.upper().replace("-", "_")
    assert f"{prefix}_SERVICE_HOST={service['spec']['clusterIP']}" in lines
    assert f"{prefix}_SERVICE_PORT_HTTP=8080" in lines
    master = cluster.plane.kubectl_json("get", "service", "-n", "default", "kubernetes")
    assert f"KUBERNETES_SERVICE_HOST={master['spec']['clusterIP']}" in lines
    cluster.delete(name)


def test_resource_refs_without_divisor_read_as_divisor_one(cluster: Cluster) -> None:
    """The API server stores an omitted divisor as the quantity 0 and serves "0";
    the pod starts and env and files hold the values for the divisor 1."""
    name = unique("nodiv")
    ref = {"resource": "limits.cpu"}
    cluster.create_pod(
        name, "echo CPU_LIMIT=$CPU_LIMIT; echo FILE_MEM=$(cat /info/mem)",
        volumes=[{"name": "info", "downwardAPI": {"items": [
            {"path": "mem", "resourceFieldRef": {"containerName": "app",
                                                 "resource": "limits.memory"}}]}}],
        container={"resources": {"limits": {"cpu": "250m", "memory": "32Mi"}},
                   "env": [{"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": ref}}],
                   "volumeMounts": [{"name": "info", "mountPath": "/info"}]})
    pod = cluster.pod(name)
    assert pod is not None
    stored = pod["spec"]["containers"][0]["env"][0]["valueFrom"]["resourceFieldRef"]
    assert stored["divisor"] == "0"
    lines = set(cluster.wait_log(name, "DONE").splitlines())
    assert "CPU_LIMIT=1" in lines  # a quarter core, rounded up
    assert f"FILE_MEM={32 * 2**20}" in lines
    cluster.delete(name)


def test_host_ip_env_is_the_nodes_ip_from_the_first_start(cluster: Cluster) -> None:
    """Upstream's e2e "should provide host IP as an env var": the first start of a pod,
    before the API server has any hostIP of it, already has the Node's InternalIP."""
    name = unique("hostip")
    # The 1.20 API server refuses status.hostIPs (newer than it); hostIP only.
    cluster.create_pod(
        name, "echo HOST_IP=$HOST_IP",
        container={"env": [{"name": "HOST_IP", "valueFrom": {"fieldRef": {
            "fieldPath": "status.hostIP"}}}]})
    lines = set(cluster.wait_log(name, "DONE").splitlines())
    node = cluster.kubelet.node() or {}
    internal = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert f"HOST_IP={internal[0]}" in lines
    assert cluster.running(name)["status"]["hostIP"] == internal[0]
    cluster.delete(name)


def test_cache_strategy_follows_the_node_ttl_annotation(
        cluster: Cluster, control_plane: ControlPlane, testbed: Testbed,
        tmp_path: Path) -> None:
    """``Cache``: an update shows after the TTL the Node's annotation sets. The
    controller manager's TTL controller annotates the nodes of a small cluster
    with 0 s; upstream's default without the annotation (60 s) would outlast
    this test."""
    kubelet = start_cluster_kubelet(
        control_plane, testbed.endpoint, tmp_path,
        {"configMapAndSecretChangeDetectionStrategy": "Cache"})
    cached = Cluster(control_plane, kubelet, cluster.namespace, cluster.image)
    cfg, pod = unique("ttl"), unique("ttl")
    try:
        ttl = wait_until(lambda: ((kubelet.node() or {}).get("metadata", {})
                                  .get("annotations") or {}).get("node.alpha.kubernetes.io/ttl"),
                         60, "the TTL controller's annotation")
        assert int(ttl) < 30
        cached.config_map(cfg, {"value": "first"})
        cached.create_pod(
            pod, "(while true; do echo \"now=$(cat /cfg/value)\"; sleep 1; done) &",
            volumes=[{"name": "cfg", "configMap": {"name": cfg}}],
            container={"volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]})
        cached.wait_log(pod, "now=first")
        cached.config_map(cfg, {"value": "second"})
        # Within a sync period (10 s) plus the TTL, far below the 60 s default.
        cached.wait_log(pod, "now=second", timeout=30)
    finally:
        cached.delete(pod)
        kubelet.stop()
        kubelet.delete_node()


def test_fs_group_lets_a_non_root_container_read_its_secret(cluster: Cluster) -> None:
    sec, name = unique("owned"), unique("nonroot")
    cluster.secret(sec, {"password": "for-group"})
    cluster.create_pod(
        name,
        "id; echo SECRET=$(cat /sec/password); stat -c 'mode=%a gid=%g' /sec/..data/password; "
        "touch /scratch/new && stat -c 'new-gid=%g' /scratch/new",
        securityContext={"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
        volumes=[{"name": "sec", "secret": {"secretName": sec, "defaultMode": 0o400}},
                 {"name": "scratch", "emptyDir": {}}],
        container={"volumeMounts": [{"name": "sec", "mountPath": "/sec"},
                                    {"name": "scratch", "mountPath": "/scratch"}]})
    text = cluster.wait_log(name, "DONE")
    assert "uid=1000" in text and "2000" in text.splitlines()[0]  # fsGroup is supplementary
    assert "SECRET=for-group" in text  # 0400 alone would keep uid 1000 out
    assert "mode=440 gid=2000" in text
    assert "new-gid=2000" in text  # the emptyDir is setgid fsGroup
    cluster.delete(name)
