"""A kubeconfig's embedded client certificate becomes the store's current one (kubeadm init).

kubeadm init writes /etc/kubernetes/kubelet.conf with the node's certificate and key
inline; its kubelet-finalize phase points kubelet.conf at
``<cert-dir>/kubelet-client-current.pem`` (so that the certificate is renewed) only when
the kubelet has made that file, which the Go kubelet does at start-up.
"""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from cryptography.x509.oid import NameOID

from pykubelet.cmd.clients import build_kubelet_clients
from pykubelet.config.server import KubeletFlags, KubeletServer
from pykubelet.config.types import KubeletConfiguration


def node_pair(node: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=1))
                   .not_valid_after(now + datetime.timedelta(days=365))
                   .sign(key, hashes.SHA256()))
    return (certificate.public_bytes(Encoding.PEM),
            key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))


def write_kubeconfig(path: Path, user: dict[str, str]) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }))
    return str(path)


def server(kubeconfig: str, cert_dir: Path, *, rotate: bool) -> KubeletServer:
    config = KubeletConfiguration()
    config.rotate_certificates = rotate
    return KubeletServer(flags=KubeletFlags(kubeconfig=kubeconfig, cert_dir=str(cert_dir)),
                         config=config)


def embedded(cert: bytes, key: bytes) -> dict[str, str]:
    return {"client-certificate-data": base64.b64encode(cert).decode(),
            "client-key-data": base64.b64encode(key).decode()}


async def test_kubeadm_init_kubeconfig_pair_is_stored_as_current(tmp_path: Path) -> None:
    cert, key = node_pair("kadm")
    kubeconfig = write_kubeconfig(tmp_path / "kubelet.conf", embedded(cert, key))
    built = await build_kubelet_clients(server(kubeconfig, tmp_path / "pki", rotate=True), "kadm")
    current = tmp_path / "pki" / "kubelet-client-current.pem"
    assert current.is_symlink()
    content = current.read_bytes()
    assert cert.strip() in content and key.strip() in content
    assert built.certificate_manager is not None
    assert built.certificate_manager.current() is not None
    assert built.certificate_manager.current().path == str(current)  # type: ignore[union-attr]


async def test_an_existing_current_pair_is_kept(tmp_path: Path) -> None:
    old_cert, old_key = node_pair("kadm")
    first = write_kubeconfig(tmp_path / "first.conf", embedded(old_cert, old_key))
    await build_kubelet_clients(server(first, tmp_path / "pki", rotate=True), "kadm")
    cert, key = node_pair("kadm")
    second = write_kubeconfig(tmp_path / "kubelet.conf", embedded(cert, key))
    await build_kubelet_clients(server(second, tmp_path / "pki", rotate=True), "kadm")
    assert old_cert.strip() in (tmp_path / "pki" / "kubelet-client-current.pem").read_bytes()


async def test_nothing_is_stored_without_rotation_or_for_certificate_files(
        tmp_path: Path) -> None:
    cert, key = node_pair("kadm")
    inline = write_kubeconfig(tmp_path / "inline.conf", embedded(cert, key))
    await build_kubelet_clients(server(inline, tmp_path / "norotate", rotate=False), "kadm")
    assert not (tmp_path / "norotate").exists()
    (tmp_path / "node.crt").write_bytes(cert)
    (tmp_path / "node.key").write_bytes(key)
    files = write_kubeconfig(tmp_path / "files.conf",
                             {"client-certificate": str(tmp_path / "node.crt"),
                              "client-key": str(tmp_path / "node.key")})
    await build_kubelet_clients(server(files, tmp_path / "pki", rotate=True), "kadm")
    assert not (tmp_path / "pki" / "kubelet-client-current.pem").exists()
