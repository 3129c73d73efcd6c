"""Where the kubelet keeps the certificates it is issued (upstream ``certificate.FileStore``).

Each certificate the kubelet obtains is written with its private key to one
PEM file in ``--cert-dir``, ``kubelet-client-<YYYY-MM-DD-HH-MM-SS>.pem``
(mode 0600), and ``kubelet-client-current.pem`` is a symlink to the newest.
The kubeconfig written after bootstrapping names the symlink as both client
certificate and key, so a rotation only has to move the link: it is replaced
atomically (a new link renamed over the old one), never left half written.
The serving certificate (``serverTLSBootstrap``) is kept the same way as
``kubelet-server-*.pem``.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from pykubelet.util.atomic_file import write_file_atomically

KUBELET_CLIENT_PREFIX = "kubelet-client"
KUBELET_SERVER_PREFIX = "kubelet-server"
TIMESTAMP_FORMAT = "%Y-%m-%d-%H-%M-%S"


class CertificateStoreError(Exception):
    pass


@dataclass(frozen=True)
class KeyPair:
    """A certificate chain and its private key, as loaded from the store."""

    certificate: x509.Certificate
    cert_pem: bytes
    key_pem: bytes
    path: str
    # Where the key is, when not in ``path`` with the certificate.
    key_path: str = ""

    @property
    def key_file(self) -> str:
        return self.key_path or self.path

    @property
    def not_before(self) -> datetime.datetime:
        return self.certificate.not_valid_before_utc

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc


def split_pem(data: bytes) -> tuple[bytes, bytes]:
    """(certificate blocks, private key block) of a combined PEM file."""
    certs: list[bytes] = []
    key = b""
    block: list[bytes] = []
    for line in data.splitlines(keepends=True):
        block.append(line)
        if line.startswith(b"-----END "):
            text = b"".join(block)
            if b"PRIVATE KEY" in line:
                key = text
            elif b"CERTIFICATE" in line:
                certs.append(text)
            block = []
    return b"".join(certs), key


def load_key_pair(path: str, key_path: str | None = None) -> KeyPair:
    """Parse ``path`` (certificate, and key unless ``key_path`` names another file)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        key_data = data
        if key_path and key_path != path:
            with open(key_path, "rb") as handle:
                key_data = handle.read()
    except OSError as err:
        raise CertificateStoreError(f"cannot read {err.filename}: {err.strerror}") from err
    cert_pem, _ = split_pem(data)
    _, key_pem = split_pem(key_data)
    if not cert_pem or not key_pem:
        raise CertificateStoreError(f"{path} does not hold a certificate and its private key")
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
        private_key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as err:
        raise CertificateStoreError(f"{path}: {err}") from err
    if not _matches(certificate, private_key):
        raise CertificateStoreError(f"{path}: the private key does not match the certificate")
    return KeyPair(certificate, cert_pem, key_pem, path, key_path or "")


def _matches(certificate: x509.Certificate, private_key: PrivateKeyTypes) -> bool:
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return bool(certificate.public_key().public_bytes(der, public)
                == private_key.public_key().public_bytes(der, public))


class FileStore:
    """``<cert_dir>/<prefix>-<timestamp>.pem`` files and the ``<prefix>-current.pem`` link."""

    def __init__(self, cert_dir: str, prefix: str = KUBELET_CLIENT_PREFIX) -> None:
        self.cert_dir = cert_dir
        self.prefix = prefix

    def current_path(self) -> str:
        return os.path.join(self.cert_dir, f"{self.prefix}-current.pem")

    def _updated_path(self) -> str:
        return os.path.join(self.cert_dir, f"{self.prefix}-updated.pem")

    def current(self) -> KeyPair | None:
        """The current pair, or None when there is none yet."""
        path = self.current_path()
        if not os.path.exists(path):
            return None
        return load_key_pair(path)

    def update(self, cert_pem: bytes, key_pem: bytes,
               now: datetime.datetime | None = None) -> KeyPair:
        """Store a new pair and make it current; returns it as loaded from disk."""
        os.makedirs(self.cert_dir, mode=0o755, exist_ok=True)
        stamp = (now or datetime.datetime.now()).strftime(TIMESTAMP_FORMAT)
        path = os.path.join(self.cert_dir, f"{self.prefix}-{stamp}.pem")
        content = cert_pem.rstrip(b"\n") + b"\n" + key_pem.rstrip(b"\n") + b"\n"
        # On disk in full before the link names it; and a second update within the same
        # second replaces the file the link may already name, so never in place.
        write_file_atomically(path, content, mode=0o600)
        pair = load_key_pair(path)
        updated = self._updated_path()
        if os.path.lexists(updated):
            os.unlink(updated)
        os.symlink(path, updated)
        os.replace(updated, self.current_path())
        return KeyPair(pair.certificate, pair.cert_pem, pair.key_pem, self.current_path())


__all__ = [
    "KUBELET_CLIENT_PREFIX",
    "KUBELET_SERVER_PREFIX",
    "CertificateStoreError",
    "FileStore",
    "KeyPair",
    "load_key_pair",
    "split_pem",
]
