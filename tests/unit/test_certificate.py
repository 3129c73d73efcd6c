"""Client certificate pieces: the cert-dir store, certificate requests, rotation deadlines."""

from __future__ import annotations

import base64
import datetime
import os
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from kubernetes_asyncio.client import (
    V1CertificateSigningRequest,
    V1CertificateSigningRequestCondition,
    V1CertificateSigningRequestSpec,
    V1CertificateSigningRequestStatus,
    V1NodeAddress,
    V1ObjectMeta,
)

from pykubelet.certificate.csr import (
    KUBELET_CLIENT_SIGNER,
    CertificateRequestError,
    digested_name,
    issued_certificate,
    make_csr,
    new_private_key,
    node_subject,
    private_key_pem,
)
from pykubelet.certificate.manager import (
    ClientCertificateManager,
    ServerCertificateManager,
    rotation_deadline,
    serving_template,
)
from pykubelet.certificate.store import (
    KUBELET_SERVER_PREFIX,
    CertificateStoreError,
    FileStore,
    load_key_pair,
)

NOW = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)


def sign(csr_pem: bytes, lifetime: datetime.timedelta,
         not_before: datetime.datetime = NOW) -> bytes:
    """A CA's answer to ``csr_pem`` (a throw-away CA, as the controller manager would sign)."""
    ca_key = new_private_key()
    request = x509.load_pem_x509_csr(csr_pem)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    certificate = (x509.CertificateBuilder().subject_name(request.subject).issuer_name(ca_name)
                   .public_key(request.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(not_before).not_valid_after(not_before + lifetime)
                   .sign(ca_key, hashes.SHA256()))
    return certificate.public_bytes(Encoding.PEM)


def issued_pair(node: str = "n1", lifetime: datetime.timedelta = datetime.timedelta(days=1)
                ) -> tuple[bytes, bytes]:
    key = new_private_key()
    return sign(make_csr(key, node_subject(node)), lifetime), private_key_pem(key)


def test_store_writes_dated_files_and_moves_the_current_link(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path))
    assert store.current() is None
    cert, key = issued_pair()
    first = store.update(cert, key, now=datetime.datetime(2024, 5, 1, 12, 0, 0))
    dated = tmp_path / "kubelet-client-2024-05-01-12-00-00.pem"
    assert os.readlink(store.current_path()) == str(dated)
    assert oct(dated.stat().st_mode & 0o777) == "0o600"
    assert first.certificate.subject == node_subject("n1")
    cert2, key2 = issued_pair()
    store.update(cert2, key2, now=datetime.datetime(2024, 6, 1, 0, 0, 0))
    current = store.current()
    assert current is not None and current.cert_pem.strip() == cert2.strip()
    assert not (tmp_path / "kubelet-client-updated.pem").exists()


def test_a_failed_update_within_the_same_second_leaves_the_current_pair_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(str(tmp_path))
    now = datetime.datetime(2024, 5, 1, 12, 0, 0)
    cert, key = issued_pair()
    store.update(cert, key, now=now)

    def disk_full(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError):
        store.update(*issued_pair(), now=now)
    current = store.current()
    assert current is not None and current.cert_pem.strip() == cert.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kubelet-client-2024-05-01-12-00-00.pem", "kubelet-client-current.pem"]


def test_a_key_that_does_not_match_is_refused(tmp_path: Path) -> None:
    cert, _ = issued_pair()
    _, other_key = issued_pair()
    path = tmp_path / "pair.pem"
    path.write_bytes(cert + other_key)
    with pytest.raises(CertificateStoreError, match="does not match"):
        load_key_pair(str(path))


def test_csr_subject_and_digested_name() -> None:
    key = new_private_key()
    request = x509.load_pem_x509_csr(make_csr(key, node_subject("worker-1")))
    assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:node:worker-1")
    assert request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "system:nodes")
    usages = ("digital signature", "key encipherment", "client auth")
    name = digested_name(key, node_subject("worker-1"), usages)
    assert name.startswith("node-csr-")
    assert name == digested_name(key, node_subject("worker-1"), usages)
    assert name != digested_name(new_private_key(), node_subject("worker-1"), usages)


def csr_with(conditions: list[tuple[str, str]], certificate: bytes | None = None
             ) -> V1CertificateSigningRequest:
    return V1CertificateSigningRequest(
        metadata=V1ObjectMeta(name="node-csr-x", uid="u1"),
        spec=V1CertificateSigningRequestSpec(request="", signer_name=KUBELET_CLIENT_SIGNER),
        status=V1CertificateSigningRequestStatus(
            conditions=[V1CertificateSigningRequestCondition(
                type=kind, status="True", reason=reason, message="by test")
                for kind, reason in conditions],
            certificate=base64.b64encode(certificate).decode() if certificate else None))


def test_issued_certificate_states() -> None:
    assert issued_certificate(csr_with([]), "u1") is None
    assert issued_certificate(csr_with([("Approved", "AutoApproved")]), "u1") is None
    assert issued_certificate(csr_with([("Approved", "AutoApproved")], b"PEM"), "u1") == b"PEM"
    with pytest.raises(CertificateRequestError, match="denied, reason: Nope"):
        issued_certificate(csr_with([("Denied", "Nope")]), "u1")
    with pytest.raises(CertificateRequestError, match="failed"):
        issued_certificate(csr_with([("Failed", "SignerError")]), "u1")
    with pytest.raises(CertificateRequestError, match="changed UIDs"):
        issued_certificate(csr_with([]), "other")


def test_rotation_deadline_is_70_to_90_percent_of_the_lifetime(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path))
    cert, key = issued_pair(lifetime=datetime.timedelta(hours=10))
    pair = store.update(cert, key)
    assert rotation_deadline(pair, 0.7) == NOW + datetime.timedelta(hours=7)
    assert rotation_deadline(pair, 0.9) == NOW + datetime.timedelta(hours=9)

    async def no_client(_: object) -> object:
        raise AssertionError("no request expected")

    deadlines = []
    for _ in range(50):
        manager = ClientCertificateManager(store, "n1", no_client,  # type: ignore[arg-type]
                                           lambda _: None)
        deadlines.append(manager.next_rotation_deadline())
    low, high = NOW + datetime.timedelta(hours=7), NOW + datetime.timedelta(hours=9)
    assert all(low <= d <= high for d in deadlines)
    assert len(set(deadlines)) > 1  # jittered


def test_a_certificate_for_another_node_is_rotated_now(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path))
    store.update(*issued_pair(node="someone-else"))
    manager = ClientCertificateManager(store, "n1", None,  # type: ignore[arg-type]
                                       lambda _: None, clock=lambda: NOW)
    assert manager.next_rotation_deadline() == NOW


# -- the serving certificate (serverTLSBootstrap) -------------------------------------------


def _addresses(*pairs: tuple[str, str]) -> list[V1NodeAddress]:
    return [V1NodeAddress(type=kind, address=value) for kind, value in pairs]


def test_serving_template_names_the_node_addresses() -> None:
    assert serving_template("n1", _addresses(("Hostname", "n1"))) is None  # no IP yet
    template = serving_template("n1", _addresses(
        ("InternalIP", "10.0.0.7"), ("Hostname", "n1"), ("ExternalDNS", "n1.example.com"),
        ("ExternalIP", "203.0.113.9"), ("InternalIP", "10.0.0.7"), ("InternalDNS", "")))
    assert template is not None
    assert template.subject == node_subject("n1")
    assert template.dns_names == ("n1", "n1.example.com")
    assert template.ip_addresses == ("10.0.0.7", "203.0.113.9")

    key = new_private_key()
    request = x509.load_pem_x509_csr(make_csr(key, template.subject, template.dns_names,
                                              template.ip_addresses))
    sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["n1", "n1.example.com"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == [
        "10.0.0.7", "203.0.113.9"]
    assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:node:n1")


def _signed_with_sans(node: str, dns: list[str], ips: list[str]) -> tuple[bytes, bytes]:
    key = new_private_key()
    request = x509.load_pem_x509_csr(make_csr(key, node_subject(node), dns, ips))
    ca_key = new_private_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    certificate = (x509.CertificateBuilder().subject_name(request.subject).issuer_name(ca_name)
                   .public_key(request.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(NOW).not_valid_after(NOW + datetime.timedelta(days=1))
                   .add_extension(sans, critical=False).sign(ca_key, hashes.SHA256()))
    return certificate.public_bytes(Encoding.PEM), private_key_pem(key)


def test_serving_certificate_is_renewed_when_the_node_addresses_change(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path), KUBELET_SERVER_PREFIX)
    pair = store.update(*_signed_with_sans("n1", ["n1"], ["10.0.0.7"]))
    assert os.path.basename(pair.path) == "kubelet-server-current.pem"
    addresses = _addresses(("InternalIP", "10.0.0.7"), ("Hostname", "n1"))
    manager = ServerCertificateManager(store, "n1", lambda: addresses, None,  # type: ignore[arg-type]
                                       lambda _: None, clock=lambda: NOW, fraction=lambda: 0.8)
    assert manager.next_rotation_deadline() == NOW + datetime.timedelta(days=0.8)
    addresses.append(V1NodeAddress(type="ExternalIP", address="203.0.113.9"))
    assert manager.next_rotation_deadline() == NOW
    # Before the node's addresses are known the certificate is kept as it is.
    addresses.clear()
    assert manager.next_rotation_deadline() == NOW + datetime.timedelta(days=0.8)
    assert manager.ttl_seconds() == 86400.0


async def test_no_serving_certificate_is_asked_for_before_the_node_has_an_ip(
        tmp_path: Path) -> None:
    async def no_client(_: object) -> object:
        raise AssertionError("no request expected without a template")

    manager = ServerCertificateManager(FileStore(str(tmp_path), KUBELET_SERVER_PREFIX), "n1",
                                       lambda: _addresses(("Hostname", "n1")),
                                       no_client,  # type: ignore[arg-type]
                                       lambda _: None)
    assert manager.current() is None and manager.ttl_seconds() == float("inf")
    assert await manager.rotate_certs() is False
