"""TLS bootstrapping and client certificate rotation against a real kube-controller-manager.

A control plane of its own signs certificates for 7 minutes only (its signer
backdates them by 5 minutes, so each is valid for 2 more): a kubelet that
bootstraps with a bootstrap token gets a certificate through a CSR the
controller manager approves, registers with it, and must renew it within
about a minute and a half (70-90% of its lifetime) while it keeps heartbeating.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.controlplane import ControlPlane, ControlPlaneError, build_binaries
from tests.integration.cluster import ClusterKubelet, parse_time, unique_node_name, wait_until
from tests.integration.kubelet_process import remove_everything
from tests.testbed import Testbed

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]

SIGNING_DURATION = "7m"


@pytest.fixture(scope="module")
def short_lived_plane() -> Iterator[ControlPlane]:
    build_binaries()
    plane = ControlPlane.fresh(signing_duration=SIGNING_DURATION)
    try:
        plane.start()
    except BaseException:
        with contextlib.suppress(ControlPlaneError):
            plane.stop()
        raise
    try:
        yield plane
    finally:
        plane.stop()


def current_certificate(kubelet: ClusterKubelet) -> x509.Certificate:
    return x509.load_pem_x509_certificate(
        (kubelet.cert_dir / "kubelet-client-current.pem").read_bytes())


def test_bootstrap_then_rotation(short_lived_plane: ControlPlane, testbed: Testbed,
                                 tmp_path: Path) -> None:
    plane = short_lived_plane
    name = unique_node_name("boot")
    kubeconfig = tmp_path / "kubelet.kubeconfig"
    kubelet = ClusterKubelet(
        tmp_path / "kubelet", testbed.endpoint, plane, name, kubeconfig=kubeconfig,
        extra_config={"rotateCertificates": True, "nodeLeaseDurationSeconds": 8},
        extra_args=["--bootstrap-kubeconfig", str(plane.bootstrap_kubeconfig())])
    try:
        kubelet.start()
        node = kubelet.wait_ready(timeout=90)
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name

        # The certificate came through a CSR the controller manager approved and signed.
        csrs = plane.kubectl_json("get", "csr")["items"]
        mine = [c for c in csrs if c["metadata"]["name"].startswith("node-csr-")
                and c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
                and c["spec"]["username"].startswith("system:bootstrap:")]
        assert mine, [c["metadata"]["name"] for c in csrs]
        assert any(cond["type"] == "Approved" for c in mine
                   for cond in c["status"].get("conditions") or [])
        first = current_certificate(kubelet)
        assert first.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
            f"system:node:{name}")
        assert first.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
            "system:nodes")
        # --kubeconfig was written to point at the certificate in --cert-dir.
        written = yaml.safe_load(kubeconfig.read_text())
        user = written["users"][0]["user"]
        assert user["client-certificate"] == str(kubelet.cert_dir / "kubelet-client-current.pem")

        # Rotation: a new certificate before this one runs out, asked for as the node itself.
        rotated = kubelet.wait_for(
            lambda: (c := current_certificate(kubelet)).serial_number != first.serial_number
            and c, 150, "the client certificate rotated")
        assert rotated.not_valid_after_utc > first.not_valid_after_utc
        renewals = [c for c in plane.kubectl_json("get", "csr")["items"]
                    if c["spec"]["username"] == f"system:node:{name}"]
        assert renewals, "the renewal CSR was not made with the node's own certificate"

        # Heartbeats carry on with the new certificate (the old one expires soon after).
        rotated_at = time.time()
        wait_until(lambda: (lease := kubelet.lease())
             and parse_time(lease["spec"]["renewTime"]).timestamp() > rotated_at + 2,
             30, "a lease renewal after the rotation")
        metrics = kubelet.wait_for(lambda: kubelet.metrics(), 10, "/metrics")
        assert "kubelet_certificate_manager_client_ttl_seconds" in metrics
        assert kubelet.forbidden_lines() == []
    finally:
        kubelet.stop()
        kubelet.delete_node()
        remove_everything(testbed.endpoint)
