"""The in-place swap of a node's kubelet: the Go kubelet 1.20 -> pykubelet -> the Go kubelet.

An operator adopts a new node agent one node at a time and in place: stop the
running kubelet (its containers keep running), start the other one with the
same configuration file, root directory, certificate directory, kubeconfig,
runtime socket, cgroup root and driver and node name, and expect every pod to
carry on: the same containers (IDs), the same restart counts, statuses still
reported, volumes still mounted, new pods started.

``SwapNode`` is that one node's settings, shared by both kubelets: the
processes differ in their command lines only (the Go kubelet 1.20 also wants
``--container-runtime remote`` and a ``--log-dir``), not in what they read or
write. The node runs on the machine itself (no test host): the node IP is the
default route's address (``host_ip``), the kubelet API listens on a port of its
own, and the pods use the testbed's private containerd. One thing is shared
with every other kubelet on the machine: 1.20 cannot be told another pod log
directory than ``/var/log/pods``, so pykubelet uses it too (its default), and
each kubelet there prunes the directories of pods it does not know.

``swap_node`` puts the node up under the Go kubelet with pods of every kind
of interest (emptyDir, configMap, secret, projected and hostPath volumes, a
hostPath PersistentVolume through its claim,
probes, a crash loop, a static pod, a Guaranteed pod with an exclusive CPU,
optionally a pod holding a device of upstream's sample device plugin, fillers
to reach a count); ``Swap.swap_to`` records each container (ID and restart
count from CRI and from the API), stops the running kubelet, starts the other,
records again and compares (``table``), then checks the node (a file written
into an emptyDir before is still there, a configMap update propagates, a
readiness change is reported, a new pod starts, logs are served). Snapshots for
the investigation (the CRI view of every container and sandbox: labels,
annotations, log path, mounts, the config containerd keeps; the checkpoints and
the pod directories under the root) go to a report directory, one per phase,
with both kubelets' logs and their kill/create decisions.

``python -m testsupport.swap`` (and ``scripts/swap.sh``) runs it on a fresh
testbed and control plane and prints the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import glob
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from pykubelet.cm.cgroups import CgroupError, CgroupManager, parse_cgroupfs_name
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport import device_plugin
from testsupport.cluster import ClusterKubelet, get_node, host_ip, is_ready, unique
from testsupport.controlplane import ControlPlane, go_kubelet_binary, running_control_plane
from testsupport.go_kubelet import (
    GO_CONTAINER_LOGS,
    GO_POD_LOGS,
    GoKubeletProcess,
    cgroup_hierarchies,
    remove_cgroup_tree,
)
from testsupport.kubelet_process import (
    _CGROUP_ROOTS,
    KubeletProcess,
    free_ports,
    unmount_pod_volumes,
)
from testsupport.polling import WaitTimeout, wait_until
from testsupport.testbed import BUSYBOX_IMAGE, Testbed

NODE_READY_TIMEOUT = 120.0
PODS_RUNNING_TIMEOUT = 180.0
# After a kubelet starts: long enough for its first syncs (a restart decided on a
# container hash, a sandbox judged changed) to have happened and shown in the API.
SETTLE_SECONDS = 40.0
CHECK_TIMEOUT = 90.0
# The CPU a static CPU manager keeps for the system (reservedSystemCPUs), the rest exclusive.
RESERVED_CPUS = "0"
CRASH_LOOP_POD = "crash-loop"


# --- the node both kubelets run ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SwapNode:
    """What both kubelets of the node share; ``config`` is the one KubeletConfiguration file."""

    base: Path
    endpoint: str
    node_name: str
    kubeconfig: Path
    node_ip: str
    go_binary: Path
    ports: tuple[int, int, int]  # read-only (0: off), healthz, kubelet API
    cpu_manager: bool

    @property
    def cgroup_root(self) -> str:
        # The Go kubelet's test-process naming (GoKubeletProcess), so its start makes it.
        return f"/{self.base.parent.name}-{self.base.name}"

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def config_path(self) -> Path:
        return self.base / "kubelet.yaml"

    @property
    def manifests(self) -> Path:
        return self.base / "manifests"

    def config(self) -> dict[str, Any]:
        """A KubeletConfiguration both kubelets accept and read alike.

        No ``podLogsDir``: 1.20 has none and writes to ``/var/log/pods``, pykubelet's default.
        ``failCgroupV1`` is not 1.20's either; its decoder ignores unknown fields (a lenient
        decoding, logged), and pykubelet needs it on the cgroup v1 test machines.
        """
        _, healthz, port = self.ports
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "0.0.0.0",
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "authentication": {"webhook": {"enabled": False}, "anonymous": {"enabled": True}},
            "authorization": {"mode": "AlwaysAllow"},
            "staticPodPath": str(self.manifests),
            "fileCheckFrequency": "20s",
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "2s",
            "nodeStatusReportFrequency": "5m",
            "makeIPTablesUtilChains": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "failCgroupV1": False,
            "protectKernelDefaults": False,
            "containerRuntimeEndpoint": self.endpoint,
        }
        if self.cpu_manager:
            config.update(cpuManagerPolicy="static", reservedSystemCPUs=RESERVED_CPUS)
        return config

    def write_config(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config()))


class SwapGoKubelet(GoKubeletProcess):
    """The Go kubelet 1.20 of a ``SwapNode``."""

    def __init__(self, node: SwapNode) -> None:
        super().__init__(node.base, node.endpoint, node.go_binary, node.node_name, {},
                         ["--kubeconfig", str(node.kubeconfig), "--node-ip", node.node_ip,
                          "--v=4"])
        _share(self, node)


class SwapPyKubelet(ClusterKubelet):
    """pykubelet on a ``SwapNode``."""

    def __init__(self, node: SwapNode, plane: ControlPlane) -> None:
        super().__init__(node.base, node.endpoint, plane, node.node_name,
                         kubeconfig=node.kubeconfig,
                         extra_config={"cgroupRoot": node.cgroup_root},
                         extra_args=["--node-ip", node.node_ip,
                                     "--container-runtime-endpoint", node.endpoint])
        _share(self, node)


def _share(kubelet: KubeletProcess, node: SwapNode) -> None:
    """The node's ports, cert directory, cgroup root and configuration file, whatever the
    class chose."""
    kubelet.read_only_port, kubelet.healthz_port, kubelet.port = node.ports
    kubelet.cert_dir = node.base / "pki"
    kubelet.cgroup_root = node.cgroup_root
    # Both constructors write their own configuration to this same path: the node's wins.
    assert kubelet.config_path == node.config_path
    node.write_config()


def make_kubelet(kind: str, node: SwapNode, plane: ControlPlane) -> KubeletProcess:
    """The kubelet of ``kind`` on ``node``. The test kubelets' constructors make a cgroup
    root of their own choosing first (``KubeletProcess``): it goes again at once."""
    before = set(_CGROUP_ROOTS)
    kubelet = SwapGoKubelet(node) if kind == "go" else SwapPyKubelet(node, plane)
    for stray in set(_CGROUP_ROOTS) - before - {node.cgroup_root}:
        with contextlib.suppress(CgroupError, OSError):
            CgroupManager().destroy(parse_cgroupfs_name(stray))
        _CGROUP_ROOTS.discard(stray)
    return kubelet


def new_node(base: Path, endpoint: str, plane: ControlPlane, *, cpu_manager: bool,
             go_binary: Path | None = None) -> SwapNode:
    name = unique("swap")
    read_only_unused, healthz, port = free_ports(3)
    del read_only_unused
    base.mkdir(parents=True, exist_ok=True)
    return SwapNode(base=base, endpoint=endpoint, node_name=name,
                    kubeconfig=plane.node_kubeconfig(name), node_ip=host_ip() or "127.0.0.1",
                    go_binary=go_binary or go_kubelet_binary(), ports=(0, healthz, port),
                    cpu_manager=cpu_manager)


# --- the pods ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Workload:
    """The pods put on the node, in ``namespace``, and the static pod's manifest name."""

    namespace: str
    api_pods: tuple[str, ...]
    static_pod: str
    hostpath_dir: Path
    # Pods whose containers restart by design (a crash loop): shown, not judged.
    restarting: tuple[str, ...] = (CRASH_LOOP_POD,)


def _pod(name: str, namespace: str, node: str, containers: list[dict[str, Any]], *,
         volumes: list[dict[str, Any]] | None = None, automount: bool = False,
         restart_policy: str = "Always", grace: int = 5) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node, "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace,
        "automountServiceAccountToken": automount,
        "containers": [{"image": BUSYBOX_IMAGE, **c} for c in containers]}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"swap": "yes"}},
            "spec": spec}


SLEEP = ["sh", "-c", "trap 'exit 0' TERM; sleep 36000 & wait"]


def workload_manifests(namespace: str, node: str, *, hostpath_dir: Path, cpu_manager: bool,
                       fillers: int, short: bool = False,
                       device: bool = False) -> list[dict[str, Any]]:
    """The API objects (configMap, secret, pods) of the workload, in creation order;
    ``short``: only the volumes, probes and crash-loop pods (and ``fillers``)."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "settings", "namespace": namespace}, "data": {"colour": "blue"}},
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "password", "namespace": namespace},
         "stringData": {"password": "s3cret"}},
    ]
    volumes = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "memory", "emptyDir": {"medium": "Memory"}},
        {"name": "settings", "configMap": {"name": "settings"}},
        {"name": "password", "secret": {"secretName": "password"}},
        {"name": "all-in-one", "projected": {"sources": [
            {"configMap": {"name": "settings"}},
            {"secret": {"name": "password"}},
            {"downwardAPI": {"items": [{"path": "labels",
                                        "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}},
        {"name": "host", "hostPath": {"path": str(hostpath_dir), "type": "DirectoryOrCreate"}},
    ]
    mounts = [{"name": "scratch", "mountPath": "/scratch"},
              {"name": "memory", "mountPath": "/memory"},
              {"name": "settings", "mountPath": "/settings"},
              {"name": "password", "mountPath": "/password"},
              {"name": "all-in-one", "mountPath": "/projected"},
              {"name": "host", "mountPath": "/host"}]
    objects.append(_pod("volumes", namespace, node, [{
        "name": "app", "volumeMounts": mounts,
        "command": ["sh", "-c", "date > /scratch/written-at-start; date > /memory/m; "
                    "hostname > /host/$(hostname); " + " ".join(SLEEP[2:])]}],
        volumes=volumes))
    objects.append(_pod("probes", namespace, node, [{
        "name": "app",
        "command": ["sh", "-c", "touch /tmp/ready; " + SLEEP[2]],
        "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 3,
                          "failureThreshold": 3},
        "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]},
                           "periodSeconds": 2, "failureThreshold": 1}},
        {"name": "http", "command": ["httpd", "-f", "-p", "8080", "-h", "/etc"],
         "readinessProbe": {"httpGet": {"path": "/hostname", "port": 8080}, "periodSeconds": 3},
         "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 3}}]))
    objects.append(_pod(CRASH_LOOP_POD, namespace, node, [{
        "name": "app", "command": ["sh", "-c", "echo crashing; sleep 2; exit 3"]}]))
    if short:
        return objects + fillers_manifests(namespace, node, fillers)
    objects.append(_pod("token", namespace, node, [{"name": "app", "command": SLEEP}],
                        automount=True))
    # A hostPath PersistentVolume bound to a claim by name, as an operator pre-provisions one.
    objects += [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-pv"},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                  "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                  "claimRef": {"namespace": namespace, "name": "data"},
                  "hostPath": {"path": str(hostpath_dir / "pv"), "type": "DirectoryOrCreate"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": namespace},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                  "volumeName": f"{namespace}-pv",
                  "resources": {"requests": {"storage": "1Gi"}}}},
        _pod("claim", namespace, node, [{
            "name": "app", "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "command": ["sh", "-c", "hostname > /data/$(hostname); " + SLEEP[2]]}],
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
    ]
    objects.append(_pod("two-containers", namespace, node, [
        {"name": "one", "command": SLEEP, "env": [{"name": "A", "value": "1"}],
         "ports": [{"containerPort": 9000, "name": "metrics"}],
         "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}},
        {"name": "two", "command": SLEEP,
         "resources": {"requests": {"memory": "16Mi"}}}]))
    if cpu_manager:
        guaranteed = {"requests": {"cpu": "1", "memory": "64Mi"},
                      "limits": {"cpu": "1", "memory": "64Mi"}}
        objects.append(_pod("exclusive-cpu", namespace, node, [{
            "name": "app", "resources": guaranteed,
            "command": ["sh", "-c", "grep Cpus_allowed_list /proc/self/status; " + SLEEP[2]]}]))
    if device:
        objects.append(_pod("device", namespace, node, [{
            "name": "app", "command": SLEEP,
            "resources": {"limits": {device_plugin.RESOURCE_NAME: "1"}}}]))
    return objects + fillers_manifests(namespace, node, fillers)


def fillers_manifests(namespace: str, node: str, count: int) -> list[dict[str, Any]]:
    """Plain pods with an emptyDir each, to reach a pod count."""
    return [_pod(f"filler-{index}", namespace, node, [{
        "name": "app", "command": SLEEP,
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
        volumes=[{"name": "scratch", "emptyDir": {}}]) for index in range(count)]


def static_manifest(node: SwapNode) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "static-web"},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                "name": "web", "image": BUSYBOX_IMAGE,
                "command": ["httpd", "-f", "-p", "18080", "-h", "/etc"]}]}}


def apply(plane: ControlPlane, objects: Sequence[dict[str, Any]]) -> None:
    plane.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(objects)}))


# --- what the runtime and the API show ---------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ContainerRecord:
    """One container of a pod as both views show it at one moment."""

    pod: str
    container: str
    api_id: str
    api_restarts: int
    ready: bool
    cri_ids: tuple[str, ...]  # running containers of that name in the runtime
    cri_attempt: int
    sandbox_ids: tuple[str, ...]  # ready sandboxes of the pod


def cri_snapshot(endpoint: str) -> dict[str, Any]:
    """Every sandbox and container with its labels, annotations, log path and mounts (the
    ``crictl inspect`` view), as plain data."""

    async def collect() -> dict[str, Any]:
        service = RemoteRuntimeService(endpoint, 30)
        await service.connect()
        try:
            sandboxes = []
            for sandbox in await service.list_pod_sandboxes():
                answer = await service.pod_sandbox_status(sandbox.id, verbose=True)
                status = answer.status
                sandboxes.append({
                    "id": sandbox.id, "state": int(sandbox.state),
                    "name": sandbox.metadata.name, "namespace": sandbox.metadata.namespace,
                    "uid": sandbox.metadata.uid, "attempt": sandbox.metadata.attempt,
                    "labels": dict(sandbox.labels), "annotations": dict(sandbox.annotations),
                    "ip": status.network.ip if status.HasField("network") else "",
                    # The config the kubelet created it with, as containerd keeps it.
                    "config": _verbose_config(answer.info),
                })
            containers = []
            for container in await service.list_containers():
                answer = await service.container_status(container.id, verbose=True)
                status = answer.status
                containers.append({
                    "id": container.id, "sandbox": container.pod_sandbox_id,
                    "state": int(container.state), "name": container.metadata.name,
                    "attempt": container.metadata.attempt,
                    "labels": dict(container.labels),
                    "annotations": dict(container.annotations),
                    "log_path": status.log_path,
                    "mounts": [{"container_path": m.container_path, "host_path": m.host_path,
                                "readonly": m.readonly, "propagation": int(m.propagation)}
                               for m in status.mounts],
                    "config": _verbose_config(answer.info),
                })
        finally:
            await service.close()
        return {"sandboxes": sandboxes, "containers": containers}

    return asyncio.run(collect())


def _verbose_config(info: Any) -> Any:
    """The ``config`` containerd keeps in a verbose status's ``info``, or None."""
    try:
        return json.loads(info.get("info", "{}")).get("config")
    except (ValueError, AttributeError):
        return None


SANDBOX_READY = 0
CONTAINER_RUNNING = 1


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def record(plane: ControlPlane, node: SwapNode, workload: Workload,
           snapshot: dict[str, Any]) -> dict[tuple[str, str], ContainerRecord]:
    """Per (pod, container): what the API's pod status and the runtime say now."""
    static_name = f"{workload.static_pod}-{node.node_name}"
    wanted = {pod_key(workload.namespace, name) for name in workload.api_pods}
    wanted.add(pod_key("default", static_name))
    api: dict[str, dict[str, Any]] = {}
    for namespace in (workload.namespace, "default"):
        for pod in plane.kubectl_json("get", "pods", "-n", namespace).get("items") or []:
            key = pod_key(namespace, pod["metadata"]["name"])
            if key in wanted:
                api[key] = pod
    sandboxes: dict[str, list[str]] = {}
    for sandbox in snapshot["sandboxes"]:
        if sandbox["state"] == SANDBOX_READY:
            sandboxes.setdefault(pod_key(sandbox["namespace"], sandbox["name"]),
                                 []).append(sandbox["id"])
    sandbox_pod = {s["id"]: pod_key(s["namespace"], s["name"]) for s in snapshot["sandboxes"]}
    running: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for container in snapshot["containers"]:
        if container["state"] == CONTAINER_RUNNING:
            running.setdefault((sandbox_pod.get(container["sandbox"], "?"),
                                container["name"]), []).append(container)
    records: dict[tuple[str, str], ContainerRecord] = {}
    for key in sorted(wanted):
        pod = api.get(key) or {}
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            found = running.get((key, status["name"]), [])
            records[(key, status["name"])] = ContainerRecord(
                pod=key, container=status["name"],
                api_id=(status.get("containerID") or "").split("://")[-1],
                api_restarts=int(status.get("restartCount") or 0),
                ready=bool(status.get("ready")),
                cri_ids=tuple(sorted(c["id"] for c in found)),
                cri_attempt=max((c["attempt"] for c in found), default=-1),
                sandbox_ids=tuple(sorted(sandboxes.get(key, []))))
    return records


@dataclasses.dataclass(frozen=True)
class Change:
    pod: str
    container: str
    before: ContainerRecord | None
    after: ContainerRecord | None
    expected_to_restart: bool

    @property
    def same_container(self) -> bool:
        return (self.before is not None and self.after is not None
                and self.before.api_id == self.after.api_id
                and self.before.cri_ids == self.after.cri_ids)

    @property
    def same_restarts(self) -> bool:
        return (self.before is not None and self.after is not None
                and self.before.api_restarts == self.after.api_restarts)

    @property
    def same_sandbox(self) -> bool:
        return (self.before is not None and self.after is not None
                and self.before.sandbox_ids == self.after.sandbox_ids)

    @property
    def unchanged(self) -> bool:
        return self.same_container and self.same_restarts and self.same_sandbox


def compare(before: dict[tuple[str, str], ContainerRecord],
            after: dict[tuple[str, str], ContainerRecord],
            workload: Workload) -> list[Change]:
    restarting = {pod_key(workload.namespace, name) for name in workload.restarting}
    return [Change(pod, container, before.get((pod, container)), after.get((pod, container)),
                   pod in restarting)
            for pod, container in sorted(set(before) | set(after))]


def table(changes: Sequence[Change], title: str) -> str:
    """The swap table: per container, IDs and restart counts before and after."""
    def short(record: ContainerRecord | None, field: str) -> str:
        if record is None:
            return "-"
        value = getattr(record, field)
        if field == "api_id":
            return str(value)[:12] or "-"
        if field == "sandbox_ids":
            return ",".join(v[:8] for v in value) or "-"
        return str(value)

    rows = [("pod/container", "id before", "id after", "restarts", "sandbox before",
             "sandbox after", "changed?")]
    for change in changes:
        what = []
        if not change.same_container:
            what.append("container")
        if not change.same_restarts:
            what.append("restarts")
        if not change.same_sandbox:
            what.append("sandbox")
        verdict = ("no" if not what else ", ".join(what)
                   + (" (crash loop: expected)" if change.expected_to_restart else ""))
        rows.append((f"{change.pod.split('/', 1)[1]}/{change.container}",
                     short(change.before, "api_id"), short(change.after, "api_id"),
                     f"{short(change.before, 'api_restarts')} -> "
                     f"{short(change.after, 'api_restarts')}",
                     short(change.before, "sandbox_ids"), short(change.after, "sandbox_ids"),
                     verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [title] + ["  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                          strict=True))
                       for row in rows]
    return "\n".join(lines)


def disk_snapshot(node: SwapNode) -> dict[str, Any]:
    """The kubelet's files under its root and device-plugin directory: the checkpoints'
    contents and the layout of pod and volume directories, and the mounts below the root."""
    root = node.root
    files: dict[str, Any] = {}
    for name in ("cpu_manager_state", "memory_manager_state"):
        path = root / name
        files[name] = path.read_text() if path.exists() else None
    checkpoint = node.base / "device-plugins" / "kubelet_internal_checkpoint"
    files["device-plugins/kubelet_internal_checkpoint"] = (
        checkpoint.read_text() if checkpoint.exists() else None)
    layout = sorted(str(path.relative_to(root)) for path in root.glob("**/*")
                    if len(path.relative_to(root).parts) <= 6 and "/..data/" not in str(path))
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        mounts = sorted({fields[4] for line in info if len(fields := line.split()) > 4
                         and fields[4].startswith(f"{root}/")})
    return {"files": files, "root_layout": layout, "mounts": mounts,
            "device_plugin_dir": sorted(os.listdir(node.base / "device-plugins"))}


# --- the checks after a swap -------------------------------------------------------------------

def kubectl_exec(plane: ControlPlane, namespace: str, pod: str, *command: str,
                 container: str = "app") -> str:
    return plane.kubectl("exec", "-n", namespace, pod, "-c", container, "--",
                         *command).stdout


def wait_node_ready(plane: ControlPlane, node: SwapNode) -> None:
    wait_until(lambda: (n := get_node(plane, node.node_name)) is not None and is_ready(n),
               NODE_READY_TIMEOUT, f"node {node.node_name} Ready", interval=1)


def wait_pods_running(plane: ControlPlane, namespace: str, names: Sequence[str],
                      timeout: float = PODS_RUNNING_TIMEOUT) -> None:
    def running() -> bool | list[str]:
        pods = {p["metadata"]["name"]: p for p in
                plane.kubectl_json("get", "pods", "-n", namespace).get("items") or []}
        missing = [name for name in names
                   if (pods.get(name) or {}).get("status", {}).get("phase") != "Running"]
        return not missing or False

    wait_until(running, timeout, f"pods {', '.join(names)} Running in {namespace}", interval=2)


def pod_ready(plane: ControlPlane, namespace: str, name: str) -> bool:
    pod = plane.kubectl_json("get", "pod", "-n", namespace, name)
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


@dataclasses.dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str = ""


def after_swap_checks(plane: ControlPlane, node: SwapNode, workload: Workload, *,
                      colour: str, new_pod: str) -> list[CheckResult]:
    """What a user notices after a swap: files, live updates, statuses, new pods."""
    ns = workload.namespace
    results: list[CheckResult] = []

    def check(name: str, body: Callable[[], str]) -> None:
        try:
            results.append(CheckResult(name, True, body()))
        except (WaitTimeout, AssertionError, RuntimeError, subprocess.SubprocessError) as err:
            results.append(CheckResult(name, False, str(err).splitlines()[0][:300]))

    def emptydir_kept() -> str:
        text = kubectl_exec(plane, ns, "volumes", "cat", "/scratch/written-at-start",
                            "/memory/m")
        assert text.strip(), "the files written before the swap are gone"
        return text.strip().replace("\n", " | ")

    def config_map_update() -> str:
        apply(plane, [{"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "settings", "namespace": ns},
                       "data": {"colour": colour}}])
        for path in ("/settings/colour", "/projected/colour"):
            def updated(path: str = path) -> bool:
                return kubectl_exec(plane, ns, "volumes", "cat", path).strip() == colour
            wait_until(updated, CHECK_TIMEOUT, f"{path} to read {colour}", interval=2)
        return f"/settings/colour and /projected/colour read {colour}"

    def readiness_flows() -> str:
        kubectl_exec(plane, ns, "probes", "rm", "/tmp/ready")
        wait_until(lambda: not pod_ready(plane, ns, "probes"), CHECK_TIMEOUT,
                   "probes not Ready", interval=1)
        kubectl_exec(plane, ns, "probes", "touch", "/tmp/ready")
        wait_until(lambda: pod_ready(plane, ns, "probes"), CHECK_TIMEOUT,
                   "probes Ready again", interval=1)
        return "Ready False then True in the API"

    def new_pod_starts() -> str:
        apply(plane, [_pod(new_pod, ns, node.node_name, [{
            "name": "app", "command": SLEEP,
            "volumeMounts": [{"name": "settings", "mountPath": "/settings"}]}],
            volumes=[{"name": "settings", "configMap": {"name": "settings"}}])])
        wait_pods_running(plane, ns, [new_pod], CHECK_TIMEOUT)
        return f"{new_pod} Running"

    def logs_served() -> str:
        text = plane.kubectl("logs", "-n", ns, CRASH_LOOP_POD).stdout
        assert "crashing" in text, text
        return "kubectl logs of the crash loop"

    check("emptyDir files written before the swap are there", emptydir_kept)
    check("a configMap update reaches the volumes", config_map_update)
    check("a readiness change is reported", readiness_flows)
    check("a new pod starts", new_pod_starts)
    check("kubectl logs served by the new kubelet", logs_served)
    if any(name == "device" for name in workload.api_pods):
        def device_advertised() -> str:
            def allocatable() -> str:
                node_object = get_node(plane, node.node_name) or {}
                return str(node_object.get("status", {}).get("allocatable", {}).get(
                    device_plugin.RESOURCE_NAME, "0"))
            wait_until(lambda: allocatable() == str(len(device_plugin.DEVICE_IDS)),
                       30, f"{device_plugin.RESOURCE_NAME} allocatable", interval=2)
            return f"{device_plugin.RESOURCE_NAME}: {allocatable()}"

        def device_mounted() -> str:
            return kubectl_exec(plane, ns, "device", "sh", "-c", "ls /tmp/Dev-*").strip()
        check("the node advertises the plugin's devices", device_advertised)
        check("the device pod still has its device", device_mounted)
    if node.cpu_manager:
        def exclusive_cpu_kept() -> str:
            text = kubectl_exec(plane, ns, "exclusive-cpu", "grep", "Cpus_allowed_list",
                                "/proc/self/status")
            return text.strip()
        check("the exclusive CPU set of the Guaranteed pod", exclusive_cpu_kept)
    return results


# --- the swap, end to end ----------------------------------------------------------------------

@dataclasses.dataclass
class Phase:
    """One kubelet's turn: the records before it started and after it settled, and checks."""

    kind: str
    changes: list[Change]
    checks: list[CheckResult]
    restart_log_lines: list[str]

    def unexpected(self) -> list[Change]:
        return [c for c in self.changes if not c.unchanged and not c.expected_to_restart]


def interesting_log_lines(kubelet: KubeletProcess) -> list[str]:
    """The lines in which a kubelet decides to kill or (re)create a container or sandbox
    (pykubelet's at --v=4 and the Go kubelet's alike), and why."""
    decisions = ("KillPod: True", "KillPod:true", "CreateSandbox: True", "CreateSandbox:true")
    reasons = ("Killing", "killing", "orphan", "definition changed", "andbox changed",
               "hash changed", "unwanted", "will be restarted", "shall be started",
               "is not in the desired state")
    lines = []
    for line in kubelet.log_text().splitlines():
        if "computePodActions got" in line:
            if any(key in line for key in decisions) or (
                    "ContainersToKill: {}" not in line and "ContainersToKill:map[]" not in line):
                lines.append(line)
        elif any(key in line for key in reasons):
            lines.append(line)
    return lines[-300:]


class Swap:
    """The node, its workload and the kubelet running it now."""

    def __init__(self, *, plane: ControlPlane, testbed_endpoint: str, base: Path,
                 report_dir: Path, cpu_manager: bool, fillers: int, short: bool = False,
                 device: bool = False, log: Callable[[str], None] = print) -> None:
        self.plane = plane
        self.device = device
        self.plugin: device_plugin.DevicePlugin | None = None
        self.node = new_node(base, testbed_endpoint, plane, cpu_manager=cpu_manager)
        self.report_dir = report_dir
        self.log = log
        namespace = unique("swapns")
        hostpath = Path("/tmp") / f"{base.parent.name}-{base.name}-hostpath"
        self.objects = workload_manifests(namespace, self.node.node_name, hostpath_dir=hostpath,
                                          cpu_manager=cpu_manager, fillers=fillers,
                                          short=short, device=device)
        pods = tuple(o["metadata"]["name"] for o in self.objects if o["kind"] == "Pod")
        self.workload = Workload(namespace=namespace, api_pods=pods, static_pod="static-web",
                                 hostpath_dir=hostpath)
        self.kubelet: KubeletProcess | None = None
        self.started: list[str] = []
        self.turn = 0
        report_dir.mkdir(parents=True, exist_ok=True)

    def start(self, kind: str) -> None:
        self.kubelet = make_kubelet(kind, self.node, self.plane)
        self.started.append(kind)
        self.log(f"starting the {kind} kubelet as node {self.node.node_name}")
        self.kubelet.start()
        wait_node_ready(self.plane, self.node)
        if self.device:
            self.start_plugin()

    def start_plugin(self) -> None:
        """The sample device plugin for the running kubelet (a new process each time: the
        1.20 plugin registers once, at its start); a registration that does not come is
        reported by the checks, not raised."""
        assert self.kubelet is not None
        if self.plugin is not None:
            self.plugin.stop()
        self.plugin = device_plugin.start(self.kubelet)
        try:
            self.plugin.wait_registered()
        except AssertionError as err:
            self.log(f"the device plugin did not register: {str(err).splitlines()[0]}")

    def stop(self) -> None:
        """Stop the running kubelet (SIGTERM; its containers keep running) and keep its log
        as ``kubelet-<n>-<kind>.log`` in the report directory."""
        kubelet, self.kubelet = self.kubelet, None
        if kubelet is not None:
            kubelet.stop()
            name = f"kubelet-{len(self.started)}-{self.started[-1]}.log"
            shutil.copyfile(kubelet.log_file, self.report_dir / name)
            kubelet.log_file.unlink(missing_ok=True)

    def create_workload(self) -> None:
        self.plane.kubectl("create", "namespace", self.workload.namespace)
        wait_until(lambda: self.plane.kubectl(
            "get", "serviceaccount", "default", "-n", self.workload.namespace,
            check=False).returncode == 0, 60, "the default service account")
        assert self.kubelet is not None
        self.kubelet.write_pod(static_manifest(self.node))
        apply(self.plane, self.objects)
        running = [p for p in self.workload.api_pods if p != CRASH_LOOP_POD]
        wait_pods_running(self.plane, self.workload.namespace, running)
        wait_until(lambda: all(pod_ready(self.plane, self.workload.namespace, p)
                               for p in running), PODS_RUNNING_TIMEOUT, "pods Ready",
                   interval=2)

    def snapshot(self, label: str) -> dict[tuple[str, str], ContainerRecord]:
        cri = cri_snapshot(self.node.endpoint)
        (self.report_dir / f"{label}-cri.json").write_text(json.dumps(cri, indent=1))
        (self.report_dir / f"{label}-disk.json").write_text(
            json.dumps(disk_snapshot(self.node), indent=1))
        return record(self.plane, self.node, self.workload, cri)

    def swap_to(self, kind: str) -> Phase:
        """Stop the running kubelet, start ``kind`` on the same node, compare and check."""
        self.turn += 1
        before = self.snapshot(f"{self.turn}-before-{kind}")
        self.stop()
        self.start(kind)
        time.sleep(SETTLE_SECONDS)
        after = self.snapshot(f"{self.turn}-after-{kind}")
        changes = compare(before, after, self.workload)
        assert self.kubelet is not None
        kubelet = self.kubelet
        checks = after_swap_checks(self.plane, self.node, self.workload,
                                   colour=f"colour-{self.turn}", new_pod=f"new-{self.turn}")
        return Phase(kind, changes, checks, interesting_log_lines(kubelet))

    def remove(self) -> None:
        """Everything the run made: kubelet, pods (through CRI), mounts, cgroups, logs,
        the namespace, the Node, the hostPath directory."""
        with contextlib.suppress(Exception):
            self.stop()
        if self.plugin is not None:
            self.plugin.stop()
        remove_node_pods(self.node.endpoint, self.workload.namespace, self.node.node_name)
        unmount_pod_volumes()
        for hierarchy in (*cgroup_hierarchies(), Path("/sys/fs/cgroup/unified")):
            remove_cgroup_tree(hierarchy / self.node.cgroup_root.lstrip("/"))
        for pattern in (f"{self.workload.namespace}_*", f"default_*-{self.node.node_name}_*"):
            for path in glob.glob(str(GO_POD_LOGS / pattern)):
                shutil.rmtree(path, ignore_errors=True)
        for pattern in (f"*_{self.workload.namespace}_*.log",
                        f"*-{self.node.node_name}_default_*.log"):
            for link in glob.glob(str(GO_CONTAINER_LOGS / pattern)):
                Path(link).unlink(missing_ok=True)
        self.plane.kubectl("delete", "namespace", self.workload.namespace, "--wait=false",
                           check=False)
        self.plane.kubectl("delete", "node", self.node.node_name, "--wait=false", check=False)
        self.plane.kubectl("delete", "persistentvolume", f"{self.workload.namespace}-pv",
                           "--wait=false", check=False)
        shutil.rmtree(self.workload.hostpath_dir, ignore_errors=True)


def remove_node_pods(endpoint: str, namespace: str, node_name: str) -> None:
    """Stop and remove the sandboxes of this run's pods (its namespace, its static pod)."""

    async def clean() -> None:
        service = RemoteRuntimeService(endpoint, 60)
        await service.connect()
        try:
            for sandbox in await service.list_pod_sandboxes():
                meta = sandbox.metadata
                if meta.namespace == namespace or meta.name.endswith(f"-{node_name}"):
                    await service.stop_pod_sandbox(sandbox.id)
                    await service.remove_pod_sandbox(sandbox.id)
        finally:
            await service.close()

    asyncio.run(clean())


@contextlib.contextmanager
def swap_node(*, plane: ControlPlane, endpoint: str, base: Path, report_dir: Path,
              cpu_manager: bool, fillers: int, short: bool = False, device: bool = False,
              log: Callable[[str], None] = print) -> Iterator[Swap]:
    """A node run by the Go kubelet with the workload Running; removed afterwards."""
    swap = Swap(plane=plane, testbed_endpoint=endpoint, base=base, report_dir=report_dir,
                cpu_manager=cpu_manager, fillers=fillers, short=short, device=device, log=log)
    try:
        swap.start("go")
        swap.create_workload()
        yield swap
    finally:
        swap.remove()


def phase_report(phase: Phase, title: str) -> str:
    lines = [table(phase.changes, title), ""]
    for check in phase.checks:
        lines.append(f"  [{'ok' if check.ok else 'FAILED'}] {check.name}: {check.detail}")
    unexpected = phase.unexpected()
    lines.append(f"  containers changed unexpectedly: {len(unexpected)} of "
                 f"{len(phase.changes)}")
    return "\n".join(lines)


def log_line(message: str) -> None:
    print(f"[swap {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testsupport.swap",
        description="Go kubelet 1.20 -> pykubelet -> Go kubelet on one node, in place.")
    parser.add_argument("--fillers", type=int, default=3,
                        help="plain pods added to the workload (22 for about 30 pods)")
    parser.add_argument("--no-cpu-manager", action="store_true",
                        help="no static CPU manager and no Guaranteed exclusive-CPU pod")
    parser.add_argument("--device-plugin", action="store_true",
                        help="the sample device plugin and a pod using one of its devices")
    parser.add_argument("--report-dir", type=Path,
                        default=Path("/tmp") / f"pykubelet-swap-report-{secrets.token_hex(3)}")
    args = parser.parse_args(argv)
    # A SIGTERM (or SIGINT, ignored in a background job) ends the run through its clean-up.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupted)
    base = Path("/tmp") / f"pkswap-{secrets.token_hex(3)}"
    log_line(f"report directory {args.report_dir}")
    failed = False
    with Testbed.fresh() as testbed, running_control_plane() as plane:
        log_line("testbed and control plane up")
        try:
            with swap_node(plane=plane, endpoint=testbed.endpoint, base=base / "node",
                           report_dir=args.report_dir, cpu_manager=not args.no_cpu_manager,
                           fillers=args.fillers, device=args.device_plugin,
                           log=log_line) as swap:
                log_line(f"{len(swap.workload.api_pods) + 1} pods Running on the Go kubelet")
                for kind, title in (("pykubelet", "Go kubelet 1.20 -> pykubelet"),
                                    ("go", "pykubelet -> Go kubelet 1.20")):
                    phase = swap.swap_to(kind)
                    text = phase_report(phase, title)
                    print(text + "\n", flush=True)
                    (args.report_dir / f"table-{swap.turn}.txt").write_text(text + "\n")
                    (args.report_dir / f"decisions-{swap.turn}.log").write_text(
                        "\n".join(phase.restart_log_lines) + "\n")
                    failed |= bool(phase.unexpected()) or not all(c.ok for c in phase.checks)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    log_line(f"done; tables, CRI and disk snapshots, kubelet logs in {args.report_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
