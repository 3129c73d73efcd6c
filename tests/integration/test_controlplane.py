"""The testbed's real control plane does what cluster mode relies on.

These tests drive the cluster with the installed kubectl, as a user would,
and prove the three things pykubelet's cluster mode builds on: admin access
works, a node credential is confined to its own Node by the Node authorizer
and NodeRestriction, and a bootstrap token gets a node client certificate
through a CSR that kube-controller-manager approves and signs. The last test
keeps the API server under node-status PATCHes for a minute: Kubernetes 1.20
built with a newer Go than it was released with crashed that way until the
build replaced its vendored reflect2.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from testsupport.cluster import unique
from testsupport.controlplane import ControlPlane
from testsupport.polling import wait_until

pytestmark = pytest.mark.controlplane

CSR_SIGNED_TIMEOUT = 60.0
STRESS_SECONDS = 60.0
# Paced so that a minute of it does not starve the other tests of the machine.
STRESS_PATCHES_PER_SECOND = 20


def node_manifest(name: str) -> str:
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
    })


@pytest.fixture
def node_names(control_plane: ControlPlane) -> Iterator[list[str]]:
    """Names for the test's Node objects; whatever exists afterwards is deleted."""
    names: list[str] = []
    yield names
    if names:
        control_plane.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *names)


def test_admin_lists_namespaces_of_a_1_20_server(control_plane: ControlPlane) -> None:
    names = control_plane.kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert {"namespace/default", "namespace/kube-system", "namespace/kube-node-lease"} <= set(
        names)
    version = control_plane.kubectl_json("version")
    assert version["serverVersion"]["gitVersion"] == control_plane.version
    assert control_plane.version.startswith("v1.20.")


def test_node_credential_registers_its_own_node_but_may_not_touch_another(
        control_plane: ControlPlane, node_names: list[str]) -> None:
    mine, other = unique("node-a"), unique("node-b")
    node_names += [mine, other]
    my_kubeconfig = control_plane.node_kubeconfig(mine)
    control_plane.kubectl("create", "-f", "-", input=node_manifest(mine),
                          kubeconfig=my_kubeconfig)
    control_plane.kubectl("create", "-f", "-", input=node_manifest(other),
                          kubeconfig=control_plane.node_kubeconfig(other))

    own = control_plane.kubectl("label", "node", mine, "pykubelet.test/own=yes",
                                kubeconfig=my_kubeconfig, check=False)
    assert own.returncode == 0, own.stderr
    foreign = control_plane.kubectl("label", "node", other, "pykubelet.test/foreign=yes",
                                    kubeconfig=my_kubeconfig, check=False)
    assert foreign.returncode != 0
    assert "forbidden" in foreign.stderr.lower()
    assert f'is not allowed to modify node "{other}"' in foreign.stderr

    labels = control_plane.kubectl_json("get", "node", other)["metadata"]["labels"]
    assert "pykubelet.test/foreign" not in labels
    secrets_list = control_plane.kubectl("get", "secrets", "-n", "kube-system",
                                         kubeconfig=my_kubeconfig, check=False)
    assert secrets_list.returncode != 0
    assert "forbidden" in secrets_list.stderr.lower()


def openssl(*args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["openssl", *args], input=input, capture_output=True,
                          check=True).stdout


def test_bootstrap_token_gets_a_node_client_certificate_through_a_csr(
        control_plane: ControlPlane, node_names: list[str], tmp_path: Path) -> None:
    node = unique("boot")
    node_names.append(node)
    csr_name = f"node-csr-{secrets.token_hex(6)}"
    bootstrap = control_plane.bootstrap_kubeconfig()

    key = tmp_path / "kubelet-client.key"
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    request = openssl("req", "-new", "-key", str(key),
                      "-subj", f"/O=system:nodes/CN=system:node:{node}")
    csr = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": csr_name},
        "spec": {
            "request": base64.b64encode(request).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "key encipherment", "client auth"],
        },
    }
    try:
        control_plane.kubectl("create", "-f", "-", input=json.dumps(csr), kubeconfig=bootstrap)
        status: dict[str, Any] = wait_until(
            lambda: (s := control_plane.kubectl_json("get", "csr", csr_name, kubeconfig=bootstrap)
                     .get("status", {})).get("certificate") and s,
            CSR_SIGNED_TIMEOUT, "the CSR signed", interval=0.5)
        approved = [c for c in status.get("conditions", []) if c["type"] == "Approved"]
        assert approved and approved[0]["reason"] == "AutoApproved"

        cert = tmp_path / "kubelet-client.crt"
        cert.write_bytes(base64.b64decode(status["certificate"]))
        openssl("verify", "-CAfile", str(control_plane.ca_cert), str(cert))
        subject = openssl("x509", "-in", str(cert), "-noout", "-subject",
                          "-nameopt", "RFC2253").decode()
        assert f"CN=system:node:{node}" in subject and "O=system:nodes" in subject

        # The signed certificate is a working node identity.
        kubeconfig = tmp_path / "kubelet.kubeconfig"
        for args in (
            ("set-cluster", "testbed", "--server", control_plane.server,
             "--certificate-authority", str(control_plane.ca_cert), "--embed-certs"),
            ("set-credentials", "node", "--client-certificate", str(cert),
             "--client-key", str(key), "--embed-certs"),
            ("set-context", "node", "--cluster", "testbed", "--user", "node"),
            ("use-context", "node"),
        ):
            control_plane.kubectl("config", *args, kubeconfig=kubeconfig)
        control_plane.kubectl("create", "-f", "-", input=node_manifest(node),
                              kubeconfig=kubeconfig)
        assert control_plane.kubectl_json("get", "node", node)["metadata"]["name"] == node
    finally:
        control_plane.kubectl("delete", "csr", csr_name, "--ignore-not-found", check=False)


async def test_api_server_stays_up_under_a_minute_of_node_status_patches(
        control_plane: ControlPlane, node_names: list[str]) -> None:
    node = unique("stress")
    node_names.append(node)
    kubeconfig = control_plane.node_kubeconfig(node)
    control_plane.kubectl("create", "-f", "-", input=node_manifest(node), kubeconfig=kubeconfig)
    apiserver_pid = control_plane.pid("kube-apiserver")
    assert apiserver_pid is not None

    api_client = await config.new_client_from_config(config_file=str(kubeconfig))
    patches = 0
    last_heartbeat = ""
    try:
        core = client.CoreV1Api(api_client)
        started = time.monotonic()
        while time.monotonic() - started < STRESS_SECONDS:
            last_heartbeat = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = {"status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                "message": f"stress patch {patches}",
                "lastHeartbeatTime": last_heartbeat, "lastTransitionTime": last_heartbeat,
            }]}}
            await core.patch_node_status(node, body)
            patches += 1
            await asyncio.sleep(1 / STRESS_PATCHES_PER_SECOND)
    finally:
        await api_client.close()

    assert patches >= STRESS_SECONDS * STRESS_PATCHES_PER_SECOND / 4
    assert control_plane.pid("kube-apiserver") == apiserver_pid
    assert control_plane.is_running()
    assert "fatal error" not in control_plane.log_path("kube-apiserver").read_text()
    ready = [c for c in control_plane.kubectl_json("get", "node", node)["status"]["conditions"]
             if c["type"] == "Ready"]
    assert ready[0]["message"] == f"stress patch {patches - 1}"
