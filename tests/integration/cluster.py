"""Cluster-mode test helpers: a Node for pykubelet on the real control plane, and disruptions.

Until pykubelet registers its own Node and renews its lease, a test
registers the Node with the admin credential (Ready, as a kubelet would report
it) and keeps its lease renewed, so that kube-controller-manager neither
garbage-collects the pods bound to it (it deletes pods of nodes that do not
exist) nor marks it unreachable. pykubelet itself runs with a node credential
(``CN=system:node:<name>``), so the Node authorizer and NodeRestriction check
every request it makes.

The disruptions act on the real processes: ``restart_apiserver`` stops the
kube-apiserver (optionally for a while, optionally compacting etcd while it
is down) and starts it again with the same command line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from kubernetes_asyncio import client, config

from pykubelet.api import from_dict
from tests.controlplane import ControlPlane

LEASE_RENEW_PERIOD = 10.0
APISERVER_READY_TIMEOUT = 120.0


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_manifest(name: str) -> dict[str, Any]:
    stamp = now_rfc3339()
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64"}},
        "status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "registered by the test", "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp}]},
    }


class LeaseRenewer(threading.Thread):
    """Renews ``kube-node-lease/<node>`` as the admin, standing in for pykubelet's own lease."""

    def __init__(self, kubeconfig: Path, node: str, node_uid: str) -> None:
        super().__init__(daemon=True, name=f"lease-{node}")
        self._kubeconfig = kubeconfig
        self._node = node
        self._node_uid = node_uid
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()
        self.join(15)

    def run(self) -> None:
        asyncio.run(self._renew_forever())

    async def _renew_forever(self) -> None:
        api_client = await config.new_client_from_config(str(self._kubeconfig))
        leases = client.CoordinationV1Api(api_client)
        try:
            while not self._stopping.is_set():
                body = {"metadata": {"name": self._node, "namespace": "kube-node-lease",
                                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                          "name": self._node,
                                                          "uid": self._node_uid}]},
                        "spec": {"holderIdentity": self._node, "leaseDurationSeconds": 40,
                                 "renewTime": datetime.now(UTC).strftime(
                                     "%Y-%m-%dT%H:%M:%S.%fZ")}}
                try:
                    try:
                        await leases.patch_namespaced_lease(self._node, "kube-node-lease", body)
                    except client.ApiException as err:
                        if err.status != 404:
                            raise
                        await leases.create_namespaced_lease("kube-node-lease",
                                                             from_dict(body, client.V1Lease))
                except Exception:  # the API server may be down on purpose; try again later
                    pass
                await asyncio.to_thread(self._stopping.wait, LEASE_RENEW_PERIOD)
        finally:
            await api_client.close()


class ClusterNode:
    """The Node object of one pykubelet, registered and kept alive by the test."""

    def __init__(self, plane: ControlPlane, name: str) -> None:
        self.plane = plane
        self.name = name
        self.kubeconfig = plane.node_kubeconfig(name)
        self._lease: LeaseRenewer | None = None

    def register(self) -> None:
        self.plane.kubectl("create", "-f", "-", input=json.dumps(node_manifest(self.name)))
        uid = self.plane.kubectl("get", "node", self.name, "-o",
                                 "jsonpath={.metadata.uid}").stdout.strip()
        self._lease = LeaseRenewer(self.plane.admin_kubeconfig, self.name, uid)
        self._lease.start()

    def set_allocatable(self, allocatable: dict[str, str] | None) -> None:
        """Write the node's allocatable as its status would (None: as registered, empty)."""
        node = self.plane.kubectl_json("get", "node", self.name)
        status = node.get("status") or {}
        if allocatable is None:
            status.pop("allocatable", None)
            status.pop("capacity", None)
        else:
            status["allocatable"] = dict(allocatable)
            status["capacity"] = dict(allocatable)
        node["status"] = status
        self._replace_status(node)

    def _replace_status(self, node: dict[str, Any]) -> None:
        # PUT /status through the raw API: kubectl has no verb for a status replace.
        self.plane.kubectl("replace", "--raw", f"/api/v1/nodes/{self.name}/status", "-f", "-",
                           input=json.dumps(node))

    def delete(self) -> None:
        if self._lease is not None:
            self._lease.stop()
        self.plane.kubectl("delete", "node", self.name, "--ignore-not-found", "--wait=false",
                           check=False)
        self.plane.kubectl("delete", "lease", "-n", "kube-node-lease", self.name,
                           "--ignore-not-found", "--wait=false", check=False)


# --- what a user sees through kubectl ---------------------------------------------------------


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


def wait_until(condition: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.25, on_timeout: Callable[[], str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    extra = f"\n{on_timeout()}" if on_timeout is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r}){extra}")


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
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
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
