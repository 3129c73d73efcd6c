"""A churn of API pods and what a node holds afterwards, shared by the soak benchmark
(``bench/soak.py``) and its short CI check (``tests/integration/test_soak.py``).

- The pod mix (``MIX``, ``soak_pod``): plain pods, a pod with a ConfigMap, a Secret
  and a projected service-account token volume, a pod with a readiness probe, a pod
  whose container fails and is restarted, a pod deleted while it starts.
- ``pod_life``: create one, delete it a set time later, recording it in a ``Churn``.
- What is left on the node (``node_leftovers``, rows ``NODE_ROWS``): pod
  directories, pod cgroups in every mounted hierarchy, the CNI host-local leases of
  the churn's pods, runtime sandboxes and containers, mounts below the root
  directory, and pykubelet's in-memory tables (its ``pykubelet_tracked_pods`` gauge).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.api import pod_from_dict
from pykubelet.cm.cgroups import CgroupManager
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.kuberuntime.labels import POD_NAMESPACE_LABEL
from testsupport.kubelet_process import TERM_EXITING_COMMAND, KubeletProcess, mount_points_under
from testsupport.testbed import CNI_LEASE_DIR

# One cycle of the pod mix, in creation order.
PLAIN, VOLUMES, READINESS, RESTARTING, DELETED_STARTING = (
    "plain", "volumes", "readiness", "restarting", "deleted-while-starting")
MIX = (PLAIN, VOLUMES, READINESS, PLAIN, RESTARTING, DELETED_STARTING)
# A pod of the last kind is deleted this long after its create was answered.
DELETE_WHILE_STARTING_SECONDS = 0.3
# pykubelet's tables (the pykubelet_tracked_pods gauge's "table" label), in table order.
TABLES = ("status_manager", "pod_workers", "probe_workers", "pod_cache", "pleg",
          "configmap_manager", "secret_manager", "env_readers", "image_pulls")
CONFIG_MAP, SECRET = "soak-config", "soak-secret"
# What node_leftovers counts, in the order the benchmark prints it.
NODE_ROWS = ("pod directories", "pod cgroups (all hierarchies)", "CNI leases",
             "runtime sandboxes", "runtime containers", "mounts below the root dir")
TABLE_ROWS = tuple(f"pykubelet {table.replace('_', ' ')} entries" for table in TABLES)


def soak_pod(name: str, kind: str, node: str, image: str) -> dict[str, Any]:
    """The pod of ``kind`` in the mix, bound to ``node``.

    Grace period 0 (the API forgets a deleted pod at once) and a shell that
    exits on SIGTERM, so that stopping a pod costs the kubelet's own work and
    not a grace period. No service-account token unless the kind asks for one.
    """
    container: dict[str, Any] = {"name": "main", "image": image,
                                 "command": list(TERM_EXITING_COMMAND)}
    spec: dict[str, Any] = {"nodeName": node, "terminationGracePeriodSeconds": 0,
                            "dnsPolicy": "Default", "automountServiceAccountToken": False,
                            "containers": [container]}
    if kind == VOLUMES:
        spec["volumes"] = [
            {"name": "config", "configMap": {"name": CONFIG_MAP}},
            {"name": "secret", "secret": {"secretName": SECRET}},
            {"name": "token", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}]
        container["volumeMounts"] = [{"name": "config", "mountPath": "/etc/config"},
                                     {"name": "secret", "mountPath": "/etc/secret"},
                                     {"name": "token", "mountPath": "/var/run/token"}]
    elif kind == READINESS:
        container["readinessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    elif kind == RESTARTING:
        container["command"] = ["sh", "-c", "sleep 1; exit 1"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"soak-kind": kind}}, "spec": spec}


def read_metric(text: str, name: str, labels: str = "") -> float | None:
    """The value of series ``name{labels}`` (labels as written, e.g. ``table="pleg"``)."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series == wanted:
            return float(value)
    return None


def kubelet_metrics(kubelet: KubeletProcess) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{kubelet.read_only_port}/metrics",
                                    timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def pod_cgroups_by_hierarchy(cgroup_root: str) -> dict[str, int]:
    """Pod cgroups below ``<cgroupRoot>/kubepods`` (and its QoS cgroups), per mounted
    hierarchy (by its directory under /sys/fs/cgroup)."""
    cgroups = CgroupManager()
    kubepods = (*tuple(part for part in cgroup_root.split("/") if part), "kubepods")
    found: dict[str, int] = {}
    for hierarchy, top in zip(cgroups.hierarchies, cgroups.all_paths(kubepods), strict=True):
        count = 0
        for parent in (top, os.path.join(top, "burstable"), os.path.join(top, "besteffort")):
            with contextlib.suppress(OSError):
                count += sum(1 for entry in os.scandir(parent)
                             if entry.is_dir() and entry.name.startswith("pod"))
        found[os.path.basename(hierarchy)] = count
    return found


def pod_cgroups(cgroup_root: str) -> int:
    """Pod cgroups summed over every mounted hierarchy: a pod left in any one counts."""
    return sum(pod_cgroups_by_hierarchy(cgroup_root).values())


def cni_leases(pod_ips: set[str], sandbox_ids: set[str]) -> int:
    """host-local lease files (named by IP, holding the sandbox id) of the benchmark's pods.
    The lease directory is shared with every other testbed of the host, hence the filter."""
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(CNI_LEASE_DIR):
            if entry.name in ("lock",) or entry.name.startswith("last_reserved_ip"):
                continue
            with contextlib.suppress(OSError):
                owner = Path(entry.path).read_text().split()[:1]
                if entry.name in pod_ips or (owner and owner[0] in sandbox_ids):
                    count += 1
    return count


@dataclass
class Churn:
    """The pods of one side's run: when each was created, and its kind."""

    created_at: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    errors: int = 0


async def pod_life(api: client.CoreV1Api, namespace: str, name: str, kind: str, node: str,
                   image: str, churn: Churn, pod_seconds: float) -> None:
    """Create the pod, then delete it ``pod_seconds`` later (or just after its create)."""
    created = time.monotonic()
    try:
        await api.create_namespaced_pod(namespace,
                                        pod_from_dict(soak_pod(name, kind, node, image)))
    except ApiException:
        churn.errors += 1
        return
    churn.created_at[name], churn.kinds[name] = created, kind
    linger = DELETE_WHILE_STARTING_SECONDS if kind == DELETED_STARTING else pod_seconds
    await asyncio.sleep(max(0.0, created + linger - time.monotonic()))
    with contextlib.suppress(ApiException):
        await api.delete_namespaced_pod(name, namespace)


async def node_leftovers(kubelet: KubeletProcess, runtime: RemoteRuntimeService, *,
                         pod_ips: set[str], sandbox_ids: set[str], pykubelet_tables: bool,
                         namespace: str | None = None) -> dict[str, float | None]:
    """Every ``NODE_ROWS`` and ``TABLE_ROWS`` count of ``kubelet`` (the tables None
    without ``pykubelet_tables``: the Go kubelet has no such gauge).

    The runtime's sandboxes and containers are those of ``namespace`` when it is
    given (a runtime shared with other tests), else all of them. The ids of the
    sandboxes seen are added to ``sandbox_ids``, which the CNI lease count reads.
    """
    sandboxes, containers = await asyncio.gather(runtime.list_pod_sandboxes(),
                                                 runtime.list_containers())
    if namespace is not None:
        sandboxes = [s for s in sandboxes if s.labels.get(POD_NAMESPACE_LABEL) == namespace]
        containers = [c for c in containers if c.labels.get(POD_NAMESPACE_LABEL) == namespace]
    sandbox_ids.update(s.id for s in sandboxes)
    pods_dir = kubelet.root / "pods"
    node: list[float | None] = [
        len(os.listdir(pods_dir)) if pods_dir.is_dir() else 0,
        await asyncio.to_thread(pod_cgroups, kubelet.cgroup_root),
        await asyncio.to_thread(cni_leases, pod_ips, sandbox_ids),
        len(sandboxes), len(containers),
        len(mount_points_under([kubelet.root], including_roots=False))]
    tables: list[float | None] = [None] * len(TABLES)
    if pykubelet_tables:
        metrics_text = await asyncio.to_thread(kubelet_metrics, kubelet)
        tables = [read_metric(metrics_text, "pykubelet_tracked_pods", f'table="{table}"')
                  for table in TABLES]
    return dict(zip((*NODE_ROWS, *TABLE_ROWS), (*node, *tables), strict=True))
