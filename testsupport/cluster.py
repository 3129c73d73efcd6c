"""A real pykubelet joined to the real control plane, what kubectl shows, and disruptions.

``ClusterKubelet`` is the end-to-end tests' ``KubeletProcess`` with a
``--kubeconfig`` (a node credential from the control plane, or a bootstrap
kubeconfig), a node name of its own (the control plane is shared by the whole
session) and no ``--node-ip`` unless asked: a node's InternalIP must be a real
interface address, never loopback. It registers its own Node and renews its
own lease; the Node authorizer and NodeRestriction check every request.

The disruptions act on the real processes: ``restart_apiserver`` stops the
kube-apiserver (optionally for a while, optionally compacting etcd while it
is down) and starts it again with the same command line.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import KubeletProcess, remove_everything
from testsupport.polling import WaitTimeout, wait_until

APISERVER_READY_TIMEOUT = 120.0


def unique(prefix: str) -> str:
    """A name no other test of the shared control plane uses."""
    return f"{prefix}-{secrets.token_hex(3)}"


def unique_node_name(prefix: str = "pyk") -> str:
    return unique(prefix)


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

    healthz_timeout = 60.0

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "pykubelet", "--config", str(self.config_path),
                "--root-dir", str(self.root), "--cert-dir", str(self.cert_dir),
                "--hostname-override", self.node_name, "--v=4"]
        if self.kubeconfig is not None:
            args += ["--kubeconfig", str(self.kubeconfig)]
        return [*args, *self.extra_args]

    def pod(self, name: str) -> dict[str, Any] | None:
        """A static pod on ``/pods`` (its name carries this node's name)."""
        full = f"{name}-{self.node_name}"
        return next((p for p in self.pods() if p["metadata"]["name"] == full), None)

    # -- what kubectl shows ----------------------------------------------------------

    def node(self) -> dict[str, Any] | None:
        return get_node(self.plane, self.node_name)

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


def start_cluster_kubelet(plane: ControlPlane, endpoint: str, base: Path,
                          extra_config: dict[str, Any] | None = None) -> ClusterKubelet:
    """pykubelet with a node credential, once its Node is Ready (it renews its own lease)."""
    name = unique_node_name()
    kubelet = ClusterKubelet(base, endpoint, plane, name,
                             kubeconfig=plane.node_kubeconfig(name), extra_config=extra_config)
    kubelet.start()
    try:
        kubelet.wait_ready(60)
    except BaseException:
        kubelet.stop()
        kubelet.delete_node()
        raise
    return kubelet


@contextlib.contextmanager
def kubelet_and_namespace(plane: ControlPlane, endpoint: str, base: Path, *, prefix: str,
                          extra_config: dict[str, Any] | None = None
                          ) -> Iterator[tuple[ClusterKubelet, str]]:
    """A Ready pykubelet node and a new namespace whose default service account exists (the
    ServiceAccount admission plugin refuses pods before it does). Afterwards the kubelet is
    stopped, the namespace and the Node deleted and every pod of the testbed removed."""
    namespace = unique(prefix)
    plane.kubectl("create", "namespace", namespace)
    kubelet = start_cluster_kubelet(plane, endpoint, base, extra_config)
    try:
        wait_until(lambda: plane.kubectl("get", "serviceaccount", "default", "-n", namespace,
                                         check=False).returncode == 0,
                   60, "the namespace's default service account")
        yield kubelet, namespace
    finally:
        kubelet.stop()
        plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubelet.delete_node()
        remove_everything(endpoint)


def host_ip() -> str | None:
    """The address of the default route's interface (no packet is sent), or None.

    Both kubelets get it as ``--node-ip``: a Node's InternalIP should be an
    address the cluster can reach, and the Go kubelet refuses a loopback one
    in its node status.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))  # TEST-NET-3: any non-local address
        except OSError:
            return None
        return str(probe.getsockname()[0])


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



# --- what a user sees through kubectl ---------------------------------------------------------


def get_node(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    """The Node as kubectl shows it, or None while there is none."""
    result = plane.kubectl("get", "node", name, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    node: dict[str, Any] = json.loads(result.stdout)
    return node


def get_pod(plane: ControlPlane, name: str, namespace: str = "default") -> dict[str, Any] | None:
    result = plane.kubectl("get", "pod", "-n", namespace, name, "-o", "json",
                           "--ignore-not-found", check=False)
    if result.returncode != 0 or not result.stdout.strip():
        return None
    pod: dict[str, Any] = json.loads(result.stdout)
    return pod


def pod_events(plane: ControlPlane, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    events = plane.kubectl_json("get", "events", "-n", namespace, "--field-selector",
                                f"involvedObject.name={name}")
    items: list[dict[str, Any]] = events.get("items") or []
    return items


def api_pod(name: str, node: str, image: str, script: str = "sleep 3600", *,
            restart_policy: str = "Always", grace: int | None = None,
            automount: bool = False, **spec: Any) -> dict[str, Any]:
    """A pod bound to ``node`` (as the scheduler would bind it) running ``script`` in busybox."""
    body: dict[str, Any] = {
        "nodeName": node, "restartPolicy": restart_policy,
        "containers": [{"name": "app", "image": image, "command": ["sh", "-c", script]}],
        **spec}
    if not automount:
        body["automountServiceAccountToken"] = False
    if grace is not None:
        body["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": body}


def create(plane: ControlPlane, manifest: dict[str, Any]) -> None:
    plane.kubectl("create", "-f", "-", input=json.dumps(manifest))


# --- disruptions ----------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> dict[int, int | bytes]:
    """Top-level fields of a protobuf message (varints and length-delimited only)."""
    fields: dict[int, int | bytes] = {}
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            fields[number], at = _read_varint(data, at)
        elif wire_type == 2:
            length, at = _read_varint(data, at)
            fields[number], at = data[at:at + length], at + length
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type}")
    return fields


def compact_etcd(plane: ControlPlane) -> int:
    """Compact etcd at its current revision; returns the revision.

    Two etcd v3 gRPC calls (KV.Range for the revision, KV.Compact), encoded by
    hand: the messages are tiny, and no etcd client is installed.
    """
    pki = plane.dir / "pki"
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "apiserver-etcd-client.key").read_bytes(),
        certificate_chain=(pki / "apiserver-etcd-client.crt").read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{plane.env['ETCD_PORT']}", credentials) as channel:
        key = b"/registry/"
        range_request = b"\x0a" + _varint(len(key)) + key + b"\x18" + _varint(1)
        answer = channel.unary_unary("/etcdserverpb.KV/Range")(range_request, timeout=30)
        header = _fields(answer)[1]
        assert isinstance(header, bytes)
        revision = _fields(header)[3]
        assert isinstance(revision, int)
        compaction = b"\x08" + _varint(revision) + b"\x10\x01"
        try:
            channel.unary_unary("/etcdserverpb.KV/Compact")(compaction, timeout=60)
        except grpc.RpcError as err:
            # Nothing written since the last compaction: already compacted there.
            if err.code() != grpc.StatusCode.OUT_OF_RANGE:
                raise
    return revision


def _apiserver_ready(plane: ControlPlane) -> bool:
    try:
        result = plane.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
    except subprocess.TimeoutExpired:
        return False  # still starting, and slow about it
    return result.returncode == 0 and result.stdout.strip() == "ok"


def restart_apiserver(plane: ControlPlane, down_for: float = 0.0,
                      while_down: Callable[[], object] | None = None) -> None:
    """Stop kube-apiserver, wait ``down_for`` seconds (running ``while_down``), start it again."""
    pid = plane.pid("kube-apiserver")
    assert pid is not None, "kube-apiserver is not running"
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    os.kill(pid, signal.SIGTERM)
    try:
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, "kube-apiserver to stop",
                   interval=0.1)
    except WaitTimeout:
        os.kill(pid, signal.SIGKILL)
    stopped = time.monotonic()
    try:
        if while_down is not None:
            while_down()
        remaining = down_for - (time.monotonic() - stopped)
        if remaining > 0:
            time.sleep(remaining)
    finally:
        # Whatever happened meanwhile, the control plane is left running.
        with open(plane.log_path("kube-apiserver"), "ab") as log:
            process = subprocess.Popen([a.decode() for a in argv], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        (plane.dir / "run" / "kube-apiserver.pid").write_text(str(process.pid))
    wait_until(lambda: _apiserver_ready(plane), APISERVER_READY_TIMEOUT,
               "kube-apiserver ready again", interval=0.5)
