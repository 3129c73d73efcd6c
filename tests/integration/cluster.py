"""A real pykubelet joined to the real control plane, and what kubectl shows of its node.

``ClusterKubelet`` is the end-to-end tests' ``KubeletProcess`` with a
``--kubeconfig`` (a node credential from the control plane, or a bootstrap
kubeconfig), a node name of its own (the control plane is shared by the whole
session) and no ``--node-ip`` unless asked: a node's InternalIP must be a real
interface address, never loopback.
"""

from __future__ import annotations

import datetime
import json
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.controlplane import ControlPlane
from tests.integration.kubelet_process import KubeletProcess


def unique_node_name(prefix: str = "pyk") -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


class ClusterKubelet(KubeletProcess):
    """pykubelet in cluster mode as node ``node_name``."""

    def __init__(self, base: Path, endpoint: str, plane: ControlPlane, node_name: str, *,
                 kubeconfig: Path | None = None, extra_config: dict[str, Any] | None = None,
                 extra_args: list[str] | None = None) -> None:
        # Quick status syncs for tests; the report frequency must then be set too,
        # or it follows the update frequency as upstream's defaulting says.
        config = {"nodeStatusUpdateFrequency": "2s", "nodeStatusReportFrequency": "5m",
                  **(extra_config or {})}
        super().__init__(base, endpoint, extra_config=config, extra_args=extra_args)
        self.plane = plane
        self.node_name = node_name
        self.kubeconfig = kubeconfig
        self.cert_dir = base / "pki"

    def start(self) -> None:
        log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child process
        args = [sys.executable, "-m", "pykubelet", "--config", str(self.config_path),
                "--root-dir", str(self.root), "--cert-dir", str(self.cert_dir),
                "--hostname-override", self.node_name, "--v=4"]
        if self.kubeconfig is not None:
            args += ["--kubeconfig", str(self.kubeconfig)]
        self.process = subprocess.Popen([*args, *self.extra_args], stdout=log,
                                        stderr=subprocess.STDOUT)
        log.close()
        try:
            self.wait_for(lambda: self.healthz() == "ok", 60, "kubelet healthz")
        except BaseException:
            self.stop()
            raise

    def pod(self, name: str) -> dict[str, Any] | None:
        """A static pod on ``/pods`` (its name carries this node's name)."""
        full = f"{name}-{self.node_name}"
        return next((p for p in self.pods() if p["metadata"]["name"] == full), None)

    # -- what kubectl shows ----------------------------------------------------------

    def node(self) -> dict[str, Any] | None:
        result = self.plane.kubectl("get", "node", self.node_name, "-o", "json", check=False)
        if result.returncode != 0:
            return None
        node: dict[str, Any] = json.loads(result.stdout)
        return node

    def lease(self) -> dict[str, Any] | None:
        result = self.plane.kubectl("get", "lease", "-n", "kube-node-lease", self.node_name,
                                    "-o", "json", check=False)
        if result.returncode != 0:
            return None
        lease: dict[str, Any] = json.loads(result.stdout)
        return lease

    def wait_ready(self, timeout: float = 30) -> dict[str, Any]:
        return dict(self.wait_for(lambda: (n := self.node()) and is_ready(n) and n, timeout,
                                  f"node {self.node_name} Ready"))

    def metrics(self) -> str:
        """``/metrics`` on the read-only port (API client and certificate metrics)."""
        with urllib.request.urlopen(
                f"http://127.0.0.1:{self.read_only_port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def forbidden_lines(self) -> list[str]:
        """Log lines of requests the API server refused (401/403)."""
        return [line for line in self.log_text().splitlines()
                if "Forbidden" in line or "Unauthorized" in line]

    def delete_node(self) -> None:
        self.plane.kubectl("delete", "node", self.node_name, "--ignore-not-found",
                           "--wait=false", check=False)


def condition(node: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in node.get("status", {}).get("conditions") or []:
        if item["type"] == kind:
            return dict(item)
    return {}


def is_ready(node: dict[str, Any]) -> bool:
    return condition(node, "Ready").get("status") == "True"


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def kubectl_get_nodes(plane: ControlPlane) -> str:
    """``kubectl get nodes`` as a user reads it."""
    return plane.kubectl("get", "nodes").stdout


def poll(condition_fn: Callable[[], Any], timeout: float, what: str,
         interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition_fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


__all__ = [
    "ClusterKubelet",
    "condition",
    "is_ready",
    "kubectl_get_nodes",
    "parse_time",
    "poll",
    "unique_node_name",
]
