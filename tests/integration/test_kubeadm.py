"""kubeadm init, join and reset with pykubelet as the kubelet, on two test hosts.

What an operator does with kubeadm v1.20.2 (scripts/testbed/kubeadm-try.sh, whose
subcommands this test runs: the flow lives there once): `kubeadm init` on one
host, `kubeadm join` with a bootstrap token on another (pykubelet TLS-bootstraps
from kubeadm's bootstrap-kubelet.conf), both nodes Ready, a Deployment's pods
running on both with `kubectl logs` answering, and `kubeadm reset` on both
leaving no kubelet, container or file of the cluster behind.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testsupport.controlplane import ControlPlaneError, kubeadm_binary
from testsupport.nodehost import MAX_INDEX, used_indexes

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "testbed" / "kubeadm-try.sh"
# Each subcommand waits for what it did with deadlines of its own; these bound a hang.
UP_TIMEOUT_SECONDS = 300
STEP_TIMEOUT_SECONDS = 240


@dataclass(frozen=True)
class KubeadmCluster:
    env: dict[str, str]
    control_plane: str
    worker: str
    kubectl: Path

    def run(self, subcommand: str, timeout: float = STEP_TIMEOUT_SECONDS
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), subcommand], env=self.env, text=True,
                              capture_output=True, timeout=timeout, check=False)

    def admin_conf(self) -> Path:
        facts = subprocess.run([str(REPO / "scripts" / "testbed" / "nodehost.sh"), "env",
                                self.control_plane], capture_output=True, text=True,
                               check=True).stdout
        node_dir = dict(line.split("=", 1) for line in facts.splitlines() if "=" in line)
        return Path(node_dir["NODE_DIR"]) / "upper_etc" / "kubernetes" / "admin.conf"

    def get(self, *args: str) -> Any:
        out = subprocess.run([str(self.kubectl), "--kubeconfig", str(self.admin_conf()), "get",
                              *args, "-o", "json"], capture_output=True, text=True,
                             check=True, timeout=30).stdout
        return json.loads(out)

    def kubectl_logs(self, pod: str) -> str:
        return subprocess.run([str(self.kubectl), "--kubeconfig", str(self.admin_conf()),
                               "logs", pod], capture_output=True, text=True, check=True,
                              timeout=30).stdout


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"


@pytest.fixture
def kubeadm_cluster(tmp_path: Path) -> Iterator[KubeadmCluster]:
    """`kubeadm-try.sh up` (kubeadm init) on two free test-host indexes; `down` after."""
    try:
        kubeadm = kubeadm_binary()
    except ControlPlaneError as err:
        pytest.skip(str(err))
    free = [i for i in range(1, MAX_INDEX + 1) if i not in used_indexes()][:2]
    if len(free) < 2:
        pytest.fail(f"no two free test-host indexes: {free}")
    name = f"kt{secrets.token_hex(3)}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("KADM_")}
    env.update(KADM_NAME=name, KADM_INDEX=str(free[0]), KADM_WORKER=f"{name}-w",
               KADM_WORKER_INDEX=str(free[1]), KADM_BASE=f"/tmp/{name}", KADM_KUBELET="py")
    cluster = KubeadmCluster(env, name, f"{name}-w", kubeadm.parent / "kubectl")
    try:
        up = cluster.run("up", timeout=UP_TIMEOUT_SECONDS)
        assert up.returncode == 0, "kubeadm init failed: " + explain(up)
        yield cluster
    finally:
        down = cluster.run("down")
        assert down.returncode == 0, explain(down)


def node_ready(node: Any) -> bool:
    conditions = node["status"]["conditions"]
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_kubeadm_join_runs_pods_on_the_worker_and_reset_leaves_nothing(
        kubeadm_cluster: KubeadmCluster) -> None:
    cluster = kubeadm_cluster
    join = cluster.run("join")
    assert join.returncode == 0, "kubeadm join failed: " + explain(join)
    assert "This node has joined the cluster" in join.stderr

    nodes = {n["metadata"]["name"]: n
             for n in cluster.get("nodes")["items"]}
    assert set(nodes) == {cluster.control_plane, cluster.worker}
    assert all(node_ready(node) for node in nodes.values())
    # The worker's kubelet got its client certificate by TLS bootstrapping with the token.
    csrs = cluster.get("csr")["items"]
    assert any(c["spec"]["username"].startswith("system:bootstrap:")
               for c in csrs)

    deploy = cluster.run("deploy")
    assert deploy.returncode == 0, "the deployment over both nodes failed: " + explain(deploy)
    # The cluster DNS stand-in, in the DNS add-on's place, answered on both nodes.
    assert deploy.stderr.count("nslookup kubernetes.default.svc.cluster.local:") == 2
    pods = cluster.get("pods", "-l", "app=kadm-spread")["items"]
    on_worker = [p for p in pods if p["spec"]["nodeName"] == cluster.worker]
    assert on_worker, "no pod on the worker"
    assert {p["spec"]["nodeName"] for p in pods} == {
        cluster.control_plane, cluster.worker}
    pod = on_worker[0]["metadata"]["name"]
    assert on_worker[0]["status"]["phase"] == "Running"
    assert cluster.kubectl_logs(pod).strip() == f"hello from {pod} on {cluster.worker}"

    reset = cluster.run("reset")
    assert reset.returncode == 0, "kubeadm reset left something: " + explain(reset)
    assert "nothing left on the hosts" in reset.stderr
