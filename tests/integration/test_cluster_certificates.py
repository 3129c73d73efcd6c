"""TLS bootstrapping, client and serving certificate rotation against a real
kube-controller-manager.

A control plane of its own signs certificates for 7 minutes only (its signer
backdates them by 5 minutes, so each is valid for 2 more): a kubelet that
bootstraps with a bootstrap token gets a certificate through a CSR the
controller manager approves, registers with it, and must renew it within
about a minute and a half (70-90% of its lifetime) while it keeps heartbeating.
A kubelet with ``serverTLSBootstrap`` asks for its serving certificate the
same way; an operator approves it (``kubectl certificate approve``), the
kubelet API serves it, and its renewal is served without a restart.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from prometheus_client.parser import text_string_to_metric_families

from testsupport.cluster import ClusterKubelet, parse_time, unique_node_name
from testsupport.controlplane import ControlPlane, running_control_plane
from testsupport.kubelet_process import remove_everything
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]

SIGNING_DURATION = "7m"


@pytest.fixture(scope="module")
def short_lived_plane() -> Iterator[ControlPlane]:
    with running_control_plane(signing_duration=SIGNING_DURATION) as plane:
        yield plane


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
        # A new certificate, not an older one. Not necessarily a later expiry: the
        # renewal may fall due at once (70% of the lifetime from a notBefore backdated 5
        # minutes is before issue), and one signed in the same second as the first has
        # the same notAfter to the second.
        assert rotated.not_valid_after_utc >= first.not_valid_after_utc
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


# -- the serving certificate (serverTLSBootstrap) -------------------------------------------


def serving_csrs(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.kubectl_json("get", "csr")["items"]
    return [c for c in items if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
            and c["spec"]["username"] == f"system:node:{node}"]


def pending(csr: dict[str, Any]) -> bool:
    return not (csr.get("status") or {}).get("conditions")


def presented_certificate(port: int) -> x509.Certificate:
    """The certificate the kubelet API presents to a new connection."""
    context = ssl.create_default_context()
    # Only what is presented matters here; verification against the CA is checked apart.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def handshake_fails(port: int) -> bool:
    try:
        presented_certificate(port)
    except (ssl.SSLError, ConnectionError):
        return True
    return False


def metric_value(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in /metrics")


def test_serving_certificate_through_a_csr_then_rotated_without_restart(
        short_lived_plane: ControlPlane, testbed: Testbed, tmp_path: Path) -> None:
    plane = short_lived_plane
    name = unique_node_name("serve")
    kubelet = ClusterKubelet(tmp_path / "kubelet", testbed.endpoint, plane, name,
                             kubeconfig=plane.node_kubeconfig(name),
                             extra_config={"serverTLSBootstrap": True})
    try:
        kubelet.start()
        node = kubelet.wait_ready(timeout=60)
        internal_ip = next(a["address"] for a in node["status"]["addresses"]
                           if a["type"] == "InternalIP")
        # The kubelet asks; nobody approves serving certificates but an operator,
        # and until then there is no certificate to serve (and no self-signed one).
        first_csr = wait_until(lambda: serving_csrs(plane, name), 30, "a kubelet-serving CSR")[0]
        assert pending(first_csr)
        assert sorted(first_csr["spec"]["usages"]) == [
            "digital signature", "key encipherment", "server auth"]
        assert handshake_fails(kubelet.port)
        assert not (kubelet.cert_dir / "kubelet.crt").exists()
        assert metric_value(kubelet.metrics(),
                            "kubelet_certificate_manager_server_ttl_seconds") == float("inf")

        plane.kubectl("certificate", "approve", first_csr["metadata"]["name"])
        stored = kubelet.cert_dir / "kubelet-server-current.pem"
        wait_until(stored.exists, 30, "the serving certificate stored")
        first = x509.load_pem_x509_certificate(stored.read_bytes())
        served = wait_until(lambda: not handshake_fails(kubelet.port)
                            and presented_certificate(kubelet.port), 10, "a TLS handshake")
        assert served.serial_number == first.serial_number
        assert served.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
            f"system:node:{name}")
        assert served.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
            "system:nodes")
        sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.DNSName) == [name]
        assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == [internal_ip]
        # Issued by the cluster's CA (kube-controller-manager's signer), for serving.
        ca = ssl.create_default_context(cafile=str(plane.ca_cert))
        ca.check_hostname = False
        with socket.create_connection(("127.0.0.1", kubelet.port), timeout=5) as raw, \
                ca.wrap_socket(raw) as verified:
            assert verified.version() in ("TLSv1.2", "TLSv1.3")
        ttl = metric_value(kubelet.metrics(), "kubelet_certificate_manager_server_ttl_seconds")
        remaining = (first.not_valid_after_utc - datetime.datetime.now(datetime.UTC))
        assert 0 < ttl <= remaining.total_seconds() + 1

        # 70-90% of 7 minutes from notBefore (5 minutes ago): a renewal within
        # about 80 s, again as a CSR the operator approves.
        pid = kubelet.process.pid if kubelet.process else None
        renewal = wait_until(
            lambda: [c for c in serving_csrs(plane, name) if pending(c)], 150,
            "a renewal CSR for the serving certificate", interval=1)[0]
        plane.kubectl("certificate", "approve", renewal["metadata"]["name"])
        rotated = wait_until(
            lambda: (c := presented_certificate(kubelet.port)).serial_number
            != first.serial_number and c, 30, "the rotated certificate served")
        # A new certificate, not an older one. Not necessarily a later expiry: the
        # renewal may fall due at once (70% of the lifetime from a notBefore backdated 5
        # minutes is before issue), and one signed in the same second as the first has
        # the same notAfter to the second.
        assert rotated.not_valid_after_utc >= first.not_valid_after_utc
        assert x509.load_pem_x509_certificate(stored.read_bytes()).serial_number == (
            rotated.serial_number)
        # Served by the same process: no restart.
        assert kubelet.process is not None and kubelet.process.poll() is None
        assert kubelet.process.pid == pid
        assert kubelet.forbidden_lines() == []

        # A restart serves the stored pair at once, without asking again first.
        kubelet.stop()
        kubelet.start()
        assert presented_certificate(kubelet.port).serial_number == rotated.serial_number
    finally:
        kubelet.stop()
        kubelet.delete_node()
        remove_everything(testbed.endpoint)
